-- File $3 ($4 bytes) uploaded under the claim ($1 key, $2 token digest).
INSERT INTO prepared_uploads (key, claim_token_sha256, sha256, size_bytes)
VALUES ($1, $2, $3, $4) ON CONFLICT (key, claim_token_sha256, sha256)
DO UPDATE SET size_bytes = excluded.size_bytes, uploaded_at = now()
