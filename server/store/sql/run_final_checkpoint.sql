-- Run $1's (state, result, and the step, size and sha256 of the checkpoint its result names as
-- final: NULL when none).
SELECT r.state, coalesce(r.result::text, '{}') AS result, c.step, c.size_bytes, c.sha256
FROM runs r LEFT JOIN LATERAL (SELECT step, size_bytes, sha256 FROM checkpoints
  WHERE run_id = r.id AND sha256 = r.result->'final_checkpoint'->>'sha256'
  ORDER BY step DESC LIMIT 1) c ON true WHERE r.id = $1
