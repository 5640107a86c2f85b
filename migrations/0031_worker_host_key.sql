-- Hardening, third round (docs/server.md#workers-states-and-benching-read-side): which box and
-- work dir a worker is, as it says at Register (WorkerInfo.host_key: SHA-256 of the machine's id
-- and the work dir's path; '' when not said). A benched box that registers again under another
-- name with the same key and token inherits its bench, so renaming does not lift a bench.
ALTER TABLE workers ADD COLUMN IF NOT EXISTS host_key TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS workers_host_key ON workers (host_key) WHERE host_key <> '';
