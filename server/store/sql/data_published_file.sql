-- Whether file $1 belongs to a ready data key.
SELECT 1 FROM prepared_files f JOIN prepared_data p USING (key)
WHERE f.sha256 = $1 AND p.state = 'ready' LIMIT 1
