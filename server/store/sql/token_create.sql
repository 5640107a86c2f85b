-- A new token: name $1, role $2, secret digest $3. Returns it as token_list does.
WITH t AS (INSERT INTO tokens (name, role, sha256) VALUES ($1, $2, $3) RETURNING *)
SELECT id, name, role, extract(epoch from created_at) AS created_at,
  revoked_at IS NOT NULL AS revoked FROM t
