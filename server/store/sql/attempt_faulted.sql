-- An attempt that failed for a cause not the run's (Complete FAILED or Release with a fault),
-- under the fence (run $1, attempt $2, token digest $3: lease_held, migration 0018): fault $4
-- ('worker' or 'unknown'), error $5, result $6 (JSON: what the attempt measured, its peak
-- memory), steps $7.
-- docs/server.md#failures:
-- - the worker joins the run's faulted_workers (it does not lease the run again while another
--   leasing worker can, for at most $12 seconds: fault_hold_until, migration 0030);
-- - 'worker': the run goes back to the queue, the attempt not spent (max_attempts + 1), unless it
--   has now failed on $8 different workers: then it ends failed;
-- - 'unknown': the attempt is spent; requeued while attempts are left, else failed;
-- - the worker's streak grows, and at $9 in a row it is benched for $10 seconds doubled per bench
--   in a row (at most $11), with its self-check due when the bench ends.
-- Returns (sweep, device, the run ended failed, the worker was benched now, worker name, bench
-- end as unix seconds); no row: fenced off.
WITH cur AS (
  SELECT id, worker_id, attempt, max_attempts,
    CASE WHEN worker_id IS NULL OR faulted_workers @> ARRAY[worker_id] THEN faulted_workers
      ELSE faulted_workers || worker_id END AS fw
  FROM runs
  WHERE id = $1 AND lease_held(runs, $2, $3)
  FOR UPDATE),
dec AS (
  SELECT cur.*, CASE WHEN $4::text = 'worker' THEN cardinality(cur.fw) >= $8::int
    ELSE cur.attempt >= cur.max_attempts END AS ended FROM cur),
upd AS (
  UPDATE runs r SET faulted_workers = dec.fw,
    worker_faults = r.worker_faults + CASE WHEN $4::text = 'worker' THEN 1 ELSE 0 END,
    max_attempts = r.max_attempts + CASE WHEN $4::text = 'worker' AND NOT dec.ended THEN 1 ELSE 0 END,
    state = CASE WHEN dec.ended THEN 'failed' ELSE 'queued' END,
    finished_at = CASE WHEN dec.ended THEN now() END,
    result = CASE WHEN dec.ended THEN $6::jsonb ELSE r.result END,
    error = CASE WHEN NOT dec.ended THEN r.error WHEN $4::text = 'worker' THEN format(
      'failed for worker-side causes on %s different workers; last: %s', cardinality(dec.fw), $5::text)
      ELSE format('failed on attempt %s of %s (cause unknown): %s', dec.attempt,
        dec.max_attempts, $5::text) END,
    lease_expires_at = NULL, step = greatest(r.step, $7::bigint),
    fault_hold_until = CASE WHEN dec.ended THEN NULL
      ELSE now() + make_interval(secs => $12::float8) END
  FROM dec WHERE r.id = dec.id
  RETURNING r.sweep_id, r.device, r.worker_id, dec.ended),
w AS (
  UPDATE workers SET runs_faulted = runs_faulted + 1, fault_streak = fault_streak + 1,
    current_run_id = CASE WHEN current_run_id = $1 THEN NULL ELSE current_run_id END,
    benched_until = CASE WHEN fault_streak + 1 >= $9::int THEN now() + make_interval(secs =>
      least($10::float8 * power(2, least(bench_count, 30)), $11::float8)) ELSE benched_until END,
    bench_reason = CASE WHEN fault_streak + 1 >= $9::int THEN format(
      '%s attempts in a row failed for worker-side causes; last (run %s): %s',
      fault_streak + 1, $1, left($5::text, 300)) ELSE bench_reason END,
    self_check_due = self_check_due OR fault_streak + 1 >= $9::int,
    bench_count = bench_count + CASE WHEN fault_streak + 1 >= $9::int THEN 1 ELSE 0 END
  WHERE id = (SELECT worker_id FROM upd)
  RETURNING name, fault_streak >= $9::int AS benched, extract(epoch from benched_until) AS until),
e AS (INSERT INTO run_events (run_id, kind, attempt, worker, message, fault)
  SELECT $1, 'faulted', $2, coalesce((SELECT name FROM w), ''),
    left($5::text, 500) || CASE WHEN upd.ended THEN '; the run failed' ELSE '; requeued' END, $4::text
  FROM upd)
SELECT upd.sweep_id, upd.device, upd.ended, coalesce((SELECT benched FROM w), false) AS benched,
  coalesce((SELECT name FROM w), '') AS worker, coalesce((SELECT until FROM w), 0) AS benched_until
FROM upd
