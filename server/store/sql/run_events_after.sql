-- Run $1's events after event id $2, oldest first, each with its id (the next call's cursor),
-- and whose fault ended the attempt (run | worker | unknown; '' when none was said).
SELECT id, extract(epoch from time) AS time, kind, attempt, worker, message, fault FROM run_events
WHERE run_id = $1 AND id > $2 ORDER BY id
