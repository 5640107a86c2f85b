-- A lease is bound to the worker holding it, not only to a guessable attempt number: Lease hands
-- the worker a random token and keeps only its SHA-256 here, and every fenced write must present
-- the token. Runs leased before this migration have '' and so are fenced off from every caller;
-- their workers see lease_lost and the runs come back through lease expiry.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS lease_token_sha256 TEXT NOT NULL DEFAULT '';
-- The bearer token that registered the worker's name: another token may not take the name over
-- while the worker is live (NULL: registered before this migration, or with --auth none).
ALTER TABLE workers ADD COLUMN IF NOT EXISTS token_id BIGINT;
