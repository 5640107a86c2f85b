-- The lease fence, defined once (issue #37, docs/architecture.md#leases-and-fencing): a worker's
-- write is accepted only from the holder of the run's current lease, that is this attempt
-- (`held_attempt`) and this lease token (`token_digest`, its SHA-256 digest) while the run is still
-- leased or running. Every fenced statement says `WHERE id = $1 AND lease_held(runs, $2, $3)`;
-- Heartbeat also asks lease_holder alone (the holder of a cancelled run is told to cancel, anyone
-- else that the lease is lost).
--
-- Both are single-expression SQL functions that are neither STRICT nor SECURITY DEFINER and have
-- no SET clause, so the planner inlines them: the statement is planned on the columns themselves,
-- and `id = $1` still finds the row by runs_pkey (tests/integration/fence_test.cc checks the
-- plans). IMMUTABLE is true of them: they read only their arguments (the row passed in).
CREATE FUNCTION lease_holder(run runs, held_attempt int, token_digest text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT run.attempt = held_attempt AND run.lease_token_sha256 = token_digest $$;

CREATE FUNCTION lease_held(run runs, held_attempt int, token_digest text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT lease_holder(run, held_attempt, token_digest) AND run.state IN ('leased', 'running') $$;
