-- The files of the ready data key $1.
SELECT role, sha256, size_bytes FROM prepared_files WHERE key = $1
ORDER BY role
