-- The live data-preparation claims worker $1 holds.
SELECT count(*) AS open_claims FROM prepared_data WHERE worker_id = $1 AND
  state = 'preparing' AND claim_expires_at >= now()
