-- The live data-preparation claims worker $1 holds.
SELECT count(*) FROM prepared_data WHERE worker_id = $1 AND
  state = 'preparing' AND claim_expires_at >= now()
