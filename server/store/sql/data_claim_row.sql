-- Data key $1's row, locked: (state, claim token digest, expired, expiry, preparer's name).
SELECT p.state, p.claim_token_sha256, p.claim_expires_at < now() AS expired,
  COALESCE(EXTRACT(EPOCH FROM p.claim_expires_at)::float8, 0) AS claim_expires_at,
  COALESCE(w.name, '') AS preparer
FROM prepared_data p LEFT JOIN workers w ON w.id = p.worker_id
WHERE p.key = $1 FOR UPDATE OF p
