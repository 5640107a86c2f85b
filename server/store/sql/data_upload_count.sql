-- The files other than $3 that the claim ($1 key, $2 token digest) uploaded.
SELECT count(*) AS uploads FROM prepared_uploads WHERE key = $1 AND
  claim_token_sha256 = $2 AND sha256 <> $3
