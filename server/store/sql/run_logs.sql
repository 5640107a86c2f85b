SELECT seq, step, attempt, time, line FROM run_logs
WHERE run_id = $1 AND seq > $2 ORDER BY seq
