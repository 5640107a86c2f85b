-- Hardening, third round (docs/server.md#failures-the-runs-the-workers-or-a-preemption): three
-- bounds on how long or how often the queue may go round for one run.
--
-- runs.releases: how many times its attempts were handed back (Release without a fault). A
-- release does not spend an attempt, so without a count a worker could lease and release one
-- run forever (300 cycles left a run queued at attempt 300 of 303 with 600 events); past the
-- server's --max-releases the run fails, as lease expiry does past --max-preemptions.
--
-- runs.fault_hold_until: a run whose attempt faulted on a worker waits for another worker only
-- until then (--fault-hold-seconds after the fault); NULL: no hold. Rows from before hold
-- nothing.
--
-- workers.last_lease_at: when the worker last asked Lease (a worker with a free slot asks at
-- least every half lease). Only such a *leasing* worker keeps a faulted run from going back to
-- the worker it faulted on: one that only heartbeats (busy, or a client that never leases) does
-- not.
ALTER TABLE runs
  ADD COLUMN IF NOT EXISTS releases INT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS fault_hold_until TIMESTAMPTZ;

ALTER TABLE workers ADD COLUMN IF NOT EXISTS last_lease_at TIMESTAMPTZ;
