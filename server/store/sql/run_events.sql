SELECT extract(epoch from time), kind, attempt, worker, message FROM run_events
WHERE run_id = $1 ORDER BY id
