-- Issue #37 (the store, second pass): a run's row and a sweep's row, as the store reads them,
-- defined once. runs_page, runs_in_flight and refine_load_runs select from run_rows; sweep_get
-- and sweep_list from sweep_rows; each names its columns as the code reads them
-- (server/store/rows.h: by name, never by position), so a column is added here and in the one
-- function that reads it (pg::RunFromRow, pg::SweepFromRow).
--
-- Both are plain views of joins and a LATERAL subquery: the planner inlines them, and a
-- statement's WHERE on the view's id, sweep_id or state reaches the base tables' indexes as it did
-- when each statement spelled the joins out (runs_pkey, runs_sweep_order, runs_held_by_sweep;
-- sweeps_pkey and run_counts' key for the counts).
--
-- A run's spec comes as stored (migration 0014): `spec_own`, its delta from its sweep's
-- run_spec_base, or for a row stored before that migration `spec_whole`. The store merges the two
-- in one place, in C++ (pg::MergeRunSpec over a base parsed once per sweep), for Lease, ListRuns
-- and refinement alike; run_spec(), the SQL copy of that merge Lease used, goes.
-- run_spec_part() stays: it picks one key (the grid point, the data sets) where a statement groups
-- or filters by it in SQL (ListCells, the stats gauges).
CREATE VIEW run_rows AS
SELECT r.id, r.sweep_id, r.cell, r.seed, r.state, r.attempt, r.max_attempts,
  coalesce(w.name, '') AS worker, r.step, r.total_steps, r.latest_train_loss,
  r.latest_val_loss, r.result::text AS result, r.error,
  extract(epoch from r.created_at) AS created_at,
  extract(epoch from r.started_at) AS started_at,
  extract(epoch from r.finished_at) AS finished_at,
  extract(epoch from r.lease_expires_at) AS lease_expires_at, r.order_index, r.refine_round,
  rs.spec::text AS spec_whole, rs.own::text AS spec_own,
  -- What its attempts were charged (run_charge, migration 0009); NULL when none was.
  ru.device_seconds, ru.usd, ru.priced, ru.device_class,
  r.memory_bytes, r.preemptions, r.worker_faults,
  -- The workers its attempts failed on for a worker-side or unknown cause (migration 0017), by
  -- name, as a JSON array.
  (SELECT coalesce(array_to_json(array_agg(fw.name ORDER BY fw.name)), '[]')::text
    FROM workers fw WHERE fw.id = ANY(r.faulted_workers)) AS faulted_workers
FROM runs r LEFT JOIN workers w ON w.id = r.worker_id
LEFT JOIN run_specs rs ON rs.run_id = r.id
LEFT JOIN LATERAL run_charge(r.id) ru ON true;

-- A sweep with its run counts: the sum of its run_counts rows (migration 0011), kept by triggers
-- on runs, so a sweep's row reads a handful of rows however many runs it has.
CREATE VIEW sweep_rows AS
SELECT s.id, s.name, s.state, s.spec_yaml, s.file_name,
  extract(epoch from s.created_at) AS created_at, extract(epoch from s.finished_at) AS finished_at,
  s.priority, array_to_json(s.axes)::text AS axes, s.submitted_by,
  c.queued, c.leased, c.running, c.succeeded, c.diverged, c.failed, c.cancelled, c.total,
  c.avg_seconds, c.skipped, c.refined, c.rounds, s.refine::text AS refine,
  s.prune_above_divergence, s.budget_gpu_hours, s.budget_usd,
  s.budget_state::text AS budget_state
FROM sweeps s, LATERAL (SELECT
  coalesce(sum(queued), 0)::bigint AS queued, coalesce(sum(leased), 0)::bigint AS leased,
  coalesce(sum(running), 0)::bigint AS running,
  coalesce(sum(succeeded), 0)::bigint AS succeeded,
  coalesce(sum(diverged), 0)::bigint AS diverged, coalesce(sum(failed), 0)::bigint AS failed,
  coalesce(sum(cancelled), 0)::bigint AS cancelled,
  coalesce(sum(queued + leased + running + succeeded + diverged + failed + cancelled
               + skipped), 0)::bigint AS total,
  coalesce(sum(skipped), 0)::bigint AS skipped, coalesce(sum(refined), 0)::bigint AS refined,
  coalesce(max(max_round), 0) AS rounds,
  (sum(finished_seconds) / nullif(sum(finished_timed), 0))::float8 AS avg_seconds
  FROM run_counts WHERE sweep_id = s.id) c;

DROP FUNCTION run_spec(JSONB, JSONB, JSONB);
