-- ReportLogs: under the fence (run $1, attempt $2, token digest $3: lease_held; FOR SHARE, so a
-- concurrent re-lease or Complete waits for these lines), the lines ($4 steps, $5 times, $6
-- text) in order. Returns held (1 when the caller holds the lease, else 0) and written (lines).
WITH fence AS (SELECT id FROM runs
  WHERE id = $1 AND lease_held(runs, $2, $3)
  FOR SHARE),
ins AS (INSERT INTO run_logs (run_id, attempt, step, time, line)
  SELECT fence.id, $2, l.step, l.time, l.line FROM fence,
    unnest($4::bigint[], $5::float8[], $6::text[]) WITH ORDINALITY
      AS l(step, time, line, n) ORDER BY l.n RETURNING 1)
SELECT (SELECT count(*) FROM fence) AS held, (SELECT count(*) FROM ins) AS written
