-- Whether the claim ($1 key, $2 token digest) uploaded file $3 with size $4.
SELECT 1 FROM prepared_uploads WHERE key = $1 AND
  claim_token_sha256 = $2 AND sha256 = $3 AND size_bytes = $4
