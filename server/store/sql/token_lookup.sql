-- The live token whose secret has digest $1, as token_list returns it.
SELECT id, name, role, extract(epoch from created_at) AS created_at,
  revoked_at IS NOT NULL AS revoked FROM tokens
WHERE sha256 = $1 AND revoked_at IS NULL
