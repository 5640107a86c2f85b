-- A sweep finished by its pruning has work again.
UPDATE sweeps SET state = 'active', finished_at = NULL WHERE id = $1
AND state = 'finished'
