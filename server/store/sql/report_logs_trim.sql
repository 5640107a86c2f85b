-- Keeps run $1's newest $2 + 1 log lines.
DELETE FROM run_logs WHERE run_id = $1 AND seq < (SELECT seq FROM run_logs
  WHERE run_id = $1 ORDER BY seq DESC OFFSET $2 LIMIT 1)
