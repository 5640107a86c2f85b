-- Run $1's checkpoint at step $2 ($3 sha256, $4 size) from attempt $5.
INSERT INTO checkpoints (run_id, step, sha256, size_bytes, attempt)
VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id, step) DO UPDATE SET
  sha256 = excluded.sha256, size_bytes = excluded.size_bytes,
  attempt = excluded.attempt, created_at = now()
