-- Renews the claim on data key $1 for $2 seconds. Returns the new expiry.
UPDATE prepared_data SET claim_expires_at = now() + make_interval(secs => $2)
WHERE key = $1 RETURNING EXTRACT(EPOCH FROM claim_expires_at)::float8 AS claim_expires_at
