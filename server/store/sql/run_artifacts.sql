-- Run $1's state and the checkpoints the server keeps for it (step, sha256, size, attempt,
-- stored at), by step, each saying whether its result names it final; one row with NULL
-- checkpoint columns when it keeps none, none when there is no such run.
SELECT r.state, c.step, c.sha256, c.size_bytes, c.attempt, extract(epoch from c.created_at) AS created_at,
  coalesce(c.sha256 = r.result->'final_checkpoint'->>'sha256', false) AS final
FROM runs r LEFT JOIN checkpoints c ON c.run_id = r.id WHERE r.id = $1 ORDER BY c.step
