UPDATE prepared_data SET state = 'ready', ready_at = now(),
  claim_expires_at = NULL WHERE key = $1
