-- Of the SHA-256s in $1 (text[]), those no row references: no checkpoint, no published prepared
-- file, no prepared-data upload awaiting its claim's publish. Their blob files may be removed.
SELECT s AS sha256 FROM unnest($1::text[]) AS s
WHERE NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.sha256 = s)
  AND NOT EXISTS (SELECT 1 FROM prepared_files p WHERE p.sha256 = s)
  AND NOT EXISTS (SELECT 1 FROM prepared_uploads u WHERE u.sha256 = s)
