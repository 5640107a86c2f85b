-- Revokes token $1 (once: a second revoke keeps the first time). Returns its id when it exists.
UPDATE tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1
RETURNING id
