-- The data sets a sweep reads: sha256 $1, path $2, size $3 (one row per sha256).
INSERT INTO datasets (sha256, path, size_bytes)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
ON CONFLICT (sha256) DO UPDATE SET path = excluded.path
