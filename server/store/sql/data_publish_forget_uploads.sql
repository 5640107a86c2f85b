DELETE FROM prepared_uploads WHERE key = $1
