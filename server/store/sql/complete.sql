-- Complete: under the fence (run $1, attempt $2, token digest $3: lease_held, migration 0018),
-- state $4 with result $5 (JSON), error $6, steps done $7 and fault $8 ('run' for a failure that
-- is the run's own, '' otherwise); the event, and the worker's count. A run that trained to its
-- end (succeeded or diverged) ends the worker's streak of worker-side failures and its run of
-- benches (docs/server.md#failures). Returns the run's sweep (no row: fenced off).
WITH upd AS (
  UPDATE runs SET state = $4, result = $5::jsonb, error = $6,
    finished_at = now(), lease_expires_at = NULL,
    step = greatest(step, $7)
  WHERE id = $1 AND lease_held(runs, $2, $3)
  RETURNING sweep_id, worker_id),
e AS (INSERT INTO run_events (run_id, kind, attempt, worker, message, fault)
  SELECT $1, 'completed', $2,
    coalesce((SELECT name FROM workers WHERE id = upd.worker_id), ''),
    CASE WHEN $8::text = '' THEN $4 ELSE $4 || ': ' || left($6, 500) END, $8::text
  FROM upd),
w AS (UPDATE workers SET runs_completed = runs_completed + 1,
  current_run_id = CASE WHEN current_run_id = $1 THEN NULL
    ELSE current_run_id END,
  fault_streak = CASE WHEN $4 = 'failed' THEN fault_streak ELSE 0 END,
  bench_count = CASE WHEN $4 = 'failed' THEN bench_count ELSE 0 END
  WHERE id = (SELECT worker_id FROM upd))
SELECT sweep_id FROM upd
