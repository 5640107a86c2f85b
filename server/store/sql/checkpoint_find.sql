-- Run $1's latest checkpoint, or its checkpoint with sha256 $2 when $2 is not empty.
SELECT step, sha256, size_bytes FROM checkpoints WHERE run_id = $1
  AND ($2 = '' OR sha256 = $2) ORDER BY step DESC LIMIT 1
