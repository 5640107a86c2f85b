-- Register: one worker token's registrations take turns ($1 the token id, 0 without auth), so
-- two at once cannot both find room under --max-worker-names.
SELECT pg_advisory_xact_lock(hashtext('ablate.worker_names'), ($1::bigint % 2147483647)::int)
