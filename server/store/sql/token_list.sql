SELECT id, name, role, extract(epoch from created_at), revoked_at IS NOT NULL FROM tokens
ORDER BY id
