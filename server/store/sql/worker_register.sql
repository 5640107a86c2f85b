-- Register worker $1 (device kind $2, info $3 as JSON) under token $4. The same name with the
-- same token (a restarted daemon, or one that passed its self-check after a bench) keeps its id
-- and its bench, if any, but owes no self-check any more; another token may take the name only
-- once the worker has been stopped or silent for $5 seconds. Its device memory per slot is the
-- info's device memory over its slots (0: not reported); its host key the info's (migration 0031).
-- Returns the id (no row: a live worker of another token has the name).
INSERT INTO workers (name, device_kind, info, token_id, memory_per_slot, host_key)
VALUES ($1, $2, $3::jsonb, $4, coalesce(($3::jsonb->>'device_memory_bytes')::bigint, 0) /
  least(greatest(coalesce(($3::jsonb->>'slots')::int, 1), 1), 64),
  coalesce($3::jsonb->>'host_key', ''))
ON CONFLICT (name) DO UPDATE SET device_kind = excluded.device_kind,
  info = excluded.info, last_seen_at = now(), current_run_id = NULL,
  token_id = excluded.token_id, stopped_at = NULL, self_check_due = false,
  memory_per_slot = excluded.memory_per_slot, host_key = excluded.host_key
WHERE workers.token_id IS NOT DISTINCT FROM excluded.token_id
  OR workers.stopped_at IS NOT NULL
  OR workers.last_seen_at <= now() - make_interval(secs => $5)
RETURNING id
