-- Register worker $1 (device kind $2, info $3 as JSON) under token $4. The same name with the
-- same token (a restarted daemon) keeps its id; another token may take the name only once the
-- worker has been stopped or silent for $5 seconds. Returns the id (no row: a live worker of
-- another token has the name).
INSERT INTO workers (name, device_kind, info, token_id) VALUES ($1, $2, $3::jsonb, $4)
ON CONFLICT (name) DO UPDATE SET device_kind = excluded.device_kind,
  info = excluded.info, last_seen_at = now(), current_run_id = NULL,
  token_id = excluded.token_id, stopped_at = NULL
WHERE workers.token_id IS NOT DISTINCT FROM excluded.token_id
  OR workers.stopped_at IS NOT NULL
  OR workers.last_seen_at <= now() - make_interval(secs => $5)
RETURNING id
