SELECT id, name, role, extract(epoch from created_at) AS created_at,
  revoked_at IS NOT NULL AS revoked FROM tokens
ORDER BY id
