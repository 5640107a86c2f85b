UPDATE sweeps SET state = 'cancelled', finished_at = now()
WHERE id = $1 AND state = 'active'
