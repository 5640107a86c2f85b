-- A benched worker's Lease (after lease_worker, which checked it is the caller's): it is alive,
-- so `ablate workers` keeps showing it benched rather than lost.
UPDATE workers SET last_seen_at = now() WHERE id = $1
