UPDATE sweeps SET state = 'active', finished_at = NULL WHERE id = $1
