INSERT INTO run_events (run_id, kind, attempt, worker) VALUES ($1, 'started', $2, $3)
