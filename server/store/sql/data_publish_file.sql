INSERT INTO prepared_files (key, role, sha256, size_bytes)
VALUES ($1, $2, $3, $4)
