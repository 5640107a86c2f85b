-- Hardening, third round (docs/server.md#hostile-input): what one run stores is bounded, and
-- these are the counts the bounds are checked against. A row per (run, metric name) with how
-- many points it holds: the ingest (server/store/ingest_store.cc) adds each batch's new points
-- and refuses a report that would take a run past --max-points-per-run, a name past
-- --max-points-per-name or the run past --max-metric-names names; a new attempt's Lease, which
-- deletes the points after its resume step, counts its run again. Counting metric_points for
-- every report would read a run's whole series each time (6 reports of 50,000 points under new
-- names took 100 MiB before there was any bound). GetRunMetrics reads the names here to tell a
-- misspelt name from one not reported yet.
CREATE TABLE IF NOT EXISTS run_metric_series (
  run_id BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  name   TEXT NOT NULL,
  points BIGINT NOT NULL,
  PRIMARY KEY (run_id, name)
);

INSERT INTO run_metric_series (run_id, name, points)
SELECT m.run_id, m.name, count(*) FROM metric_points m
WHERE EXISTS (SELECT 1 FROM runs r WHERE r.id = m.run_id)
GROUP BY m.run_id, m.name
ON CONFLICT (run_id, name) DO NOTHING;

-- The bound a batch of new points is checked against, written once for both checks the ingest
-- makes (ingest_series_check.sql: every point of the batch counted as new;
-- ingest_series_check_new.sql: only the points not stored yet). The runs of `new_runs` whose
-- series, with `new_points` more under (run, `new_names`), would hold more than `max_points` in
-- all, `max_per_name` under one name, or more than `max_names` names; each with those figures.
CREATE OR REPLACE FUNCTION run_series_over(new_runs bigint[], new_names text[],
    new_points bigint[], max_points bigint, max_per_name bigint, max_names bigint)
RETURNS TABLE (over_run bigint, over_points bigint, over_names bigint, over_top bigint)
LANGUAGE sql STABLE
AS $$
  WITH n AS (SELECT * FROM unnest(new_runs, new_names, new_points) AS n(run, metric, added)),
  cur AS (SELECT s.run_id AS run, s.name AS metric, s.points AS held FROM run_metric_series s
    WHERE s.run_id = ANY(new_runs)),
  would AS (
    SELECT coalesce(n.run, cur.run) AS run, coalesce(cur.held, 0) + coalesce(n.added, 0) AS total
    FROM n FULL JOIN cur ON cur.run = n.run AND cur.metric = n.metric)
  SELECT would.run, sum(would.total)::bigint, count(*), max(would.total) FROM would
  GROUP BY would.run
  HAVING sum(would.total) > max_points OR count(*) > max_names OR max(would.total) > max_per_name
$$;
