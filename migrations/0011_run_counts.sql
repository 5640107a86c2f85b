-- Issue #22 (fleet scale): a sweep's run counts without walking its runs.
--
-- GetSweep, ListSweeps, WatchSweep, ListRuns' total, the ETA's remaining work and /metrics all
-- read how many of a sweep's runs are in each state. Counting them walked every run of the sweep
-- (~100 ms at 100,000 runs, each call). run_counts holds the counts by sweep and run shape
-- (device, dtype, FLOPs per token, FLOPs: what the ETA groups by) as deltas that sum to the
-- truth: statement-level triggers on runs append one row per (sweep, shape) a statement changed,
-- inside that statement's transaction, so a reader's snapshot sees counts exactly as consistent
-- as the runs themselves. Appending rather than updating one row per sweep means concurrent
-- Lease and Complete transactions never wait on each other here (a shared counter row would
-- serialise them and deadlock a whole-sweep Cancel against a Complete). The server folds the
-- deltas of each (sweep, shape) into one row every second (statement run_counts_compact), so a
-- sweep has about one row per shape plus the last second's transitions.
--
-- Columns: a count per state (the eight of runs_state_check), runs added by refinement
-- (refine_round > 0), the highest refine_round, and the finished runs' durations for the mean
-- (succeeded/diverged/failed with started_at set: finished_seconds summed exactly as numeric,
-- finished_timed how many).
CREATE TABLE IF NOT EXISTS run_counts (
  sweep_id          BIGINT NOT NULL,
  device            TEXT NOT NULL,
  dtype             TEXT,
  flops_per_token   DOUBLE PRECISION,
  flops             DOUBLE PRECISION,
  queued            BIGINT NOT NULL DEFAULT 0,
  leased            BIGINT NOT NULL DEFAULT 0,
  running           BIGINT NOT NULL DEFAULT 0,
  succeeded         BIGINT NOT NULL DEFAULT 0,
  diverged          BIGINT NOT NULL DEFAULT 0,
  failed            BIGINT NOT NULL DEFAULT 0,
  cancelled         BIGINT NOT NULL DEFAULT 0,
  skipped           BIGINT NOT NULL DEFAULT 0,
  refined           BIGINT NOT NULL DEFAULT 0,
  max_round         INT NOT NULL DEFAULT 0,
  finished_seconds  NUMERIC NOT NULL DEFAULT 0,
  finished_timed    BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS run_counts_sweep ON run_counts (sweep_id);

-- One run's contribution, signed: what the three triggers below sum per (sweep, shape).
CREATE OR REPLACE FUNCTION run_counts_rows(sign INT, r runs)
  RETURNS TABLE (sweep_id BIGINT, device TEXT, dtype TEXT, flops_per_token DOUBLE PRECISION,
                 flops DOUBLE PRECISION, queued INT, leased INT, running INT, succeeded INT,
                 diverged INT, failed INT, cancelled INT, skipped INT, refined INT,
                 round INT, seconds NUMERIC, timed INT)
  LANGUAGE sql IMMUTABLE AS $$
  SELECT r.sweep_id, r.device, r.dtype, r.flops_per_token, r.flops,
    sign * (r.state = 'queued')::int, sign * (r.state = 'leased')::int,
    sign * (r.state = 'running')::int, sign * (r.state = 'succeeded')::int,
    sign * (r.state = 'diverged')::int, sign * (r.state = 'failed')::int,
    sign * (r.state = 'cancelled')::int, sign * (r.state = 'skipped')::int,
    sign * (r.refine_round > 0)::int,
    CASE WHEN sign > 0 THEN r.refine_round ELSE 0 END,
    CASE WHEN r.state IN ('succeeded', 'diverged', 'failed') AND r.started_at IS NOT NULL
      AND r.finished_at IS NOT NULL
      THEN sign * extract(epoch from r.finished_at - r.started_at) ELSE 0 END,
    CASE WHEN r.state IN ('succeeded', 'diverged', 'failed') AND r.started_at IS NOT NULL
      AND r.finished_at IS NOT NULL THEN sign ELSE 0 END
$$;

-- Appends the signed rows of a statement's old and new runs, summed per (sweep, shape), leaving
-- out sums that change nothing (a heartbeat or a metrics report rewrites runs without moving a
-- count). refine_round is set when a run is inserted and never changes, so the highest round
-- comes from inserted rows alone.
CREATE OR REPLACE FUNCTION run_counts_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO run_counts (sweep_id, device, dtype, flops_per_token, flops, queued, leased,
    running, succeeded, diverged, failed, cancelled, skipped, refined, max_round,
    finished_seconds, finished_timed)
  SELECT c.sweep_id, c.device, c.dtype, c.flops_per_token, c.flops, sum(c.queued),
    sum(c.leased), sum(c.running), sum(c.succeeded), sum(c.diverged), sum(c.failed),
    sum(c.cancelled), sum(c.skipped), sum(c.refined), max(c.round), sum(c.seconds), sum(c.timed)
  FROM new_runs n, LATERAL run_counts_rows(1, n) c
  GROUP BY 1, 2, 3, 4, 5;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION run_counts_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO run_counts (sweep_id, device, dtype, flops_per_token, flops, queued, leased,
    running, succeeded, diverged, failed, cancelled, skipped, refined, max_round,
    finished_seconds, finished_timed)
  SELECT c.sweep_id, c.device, c.dtype, c.flops_per_token, c.flops, sum(c.queued),
    sum(c.leased), sum(c.running), sum(c.succeeded), sum(c.diverged), sum(c.failed),
    sum(c.cancelled), sum(c.skipped), sum(c.refined), max(c.round), sum(c.seconds), sum(c.timed)
  FROM (SELECT x.* FROM new_runs n, LATERAL run_counts_rows(1, n) x
        UNION ALL
        SELECT x.* FROM old_runs o, LATERAL run_counts_rows(-1, o) x) c
  GROUP BY 1, 2, 3, 4, 5
  HAVING sum(c.queued) <> 0 OR sum(c.leased) <> 0 OR sum(c.running) <> 0
    OR sum(c.succeeded) <> 0 OR sum(c.diverged) <> 0 OR sum(c.failed) <> 0
    OR sum(c.cancelled) <> 0 OR sum(c.skipped) <> 0 OR sum(c.refined) <> 0
    OR sum(c.seconds) <> 0 OR sum(c.timed) <> 0;
  RETURN NULL;
END $$;

-- Runs are deleted only with their sweep (ON DELETE CASCADE): its counts go with it. A run
-- deleted while its sweep stays is subtracted.
CREATE OR REPLACE FUNCTION run_counts_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM run_counts WHERE sweep_id IN (SELECT DISTINCT o.sweep_id FROM old_runs o)
    AND NOT EXISTS (SELECT 1 FROM sweeps s WHERE s.id = run_counts.sweep_id);
  INSERT INTO run_counts (sweep_id, device, dtype, flops_per_token, flops, queued, leased,
    running, succeeded, diverged, failed, cancelled, skipped, refined, max_round,
    finished_seconds, finished_timed)
  SELECT c.sweep_id, c.device, c.dtype, c.flops_per_token, c.flops, sum(c.queued),
    sum(c.leased), sum(c.running), sum(c.succeeded), sum(c.diverged), sum(c.failed),
    sum(c.cancelled), sum(c.skipped), sum(c.refined), 0, sum(c.seconds), sum(c.timed)
  FROM old_runs o, LATERAL run_counts_rows(-1, o) c
  WHERE EXISTS (SELECT 1 FROM sweeps s WHERE s.id = o.sweep_id)
  GROUP BY 1, 2, 3, 4, 5;
  RETURN NULL;
END $$;

-- Writers of runs wait while the counts are rebuilt, so none slips between the count and the
-- triggers (another replica still on the old binary may be writing).
LOCK TABLE runs IN SHARE ROW EXCLUSIVE MODE;
DROP TRIGGER IF EXISTS runs_count_insert ON runs;
DROP TRIGGER IF EXISTS runs_count_update ON runs;
DROP TRIGGER IF EXISTS runs_count_delete ON runs;
CREATE TRIGGER runs_count_insert AFTER INSERT ON runs REFERENCING NEW TABLE AS new_runs
  FOR EACH STATEMENT EXECUTE FUNCTION run_counts_insert();
CREATE TRIGGER runs_count_update AFTER UPDATE ON runs
  REFERENCING OLD TABLE AS old_runs NEW TABLE AS new_runs
  FOR EACH STATEMENT EXECUTE FUNCTION run_counts_update();
CREATE TRIGGER runs_count_delete AFTER DELETE ON runs REFERENCING OLD TABLE AS old_runs
  FOR EACH STATEMENT EXECUTE FUNCTION run_counts_delete();
DELETE FROM run_counts;
INSERT INTO run_counts (sweep_id, device, dtype, flops_per_token, flops, queued, leased,
  running, succeeded, diverged, failed, cancelled, skipped, refined, max_round,
  finished_seconds, finished_timed)
SELECT c.sweep_id, c.device, c.dtype, c.flops_per_token, c.flops, sum(c.queued),
  sum(c.leased), sum(c.running), sum(c.succeeded), sum(c.diverged), sum(c.failed),
  sum(c.cancelled), sum(c.skipped), sum(c.refined), max(c.round), sum(c.seconds), sum(c.timed)
FROM runs r, LATERAL run_counts_rows(1, r) c
GROUP BY 1, 2, 3, 4, 5;

-- ListRuns pages a sweep newest first (runs_page): without this each page sorted every run of
-- the sweep.
CREATE INDEX IF NOT EXISTS runs_sweep_order ON runs (sweep_id, order_index);
-- The runs a sweep has in flight (the ETA's running fraction, WatchSweep of a big sweep):
-- runs_unfinished would walk every queued run of the sweep too.
CREATE INDEX IF NOT EXISTS runs_held_by_sweep ON runs (sweep_id) WHERE state IN ('leased', 'running');
