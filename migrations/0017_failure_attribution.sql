-- Failures attributed to the run or the worker (issue #38, docs/server.md#failures).
--
-- runs: memory_bytes is the device memory an attempt is estimated to need (common/cost/memory.h;
-- 0 for runs stored before, which every worker may lease); preemptions and worker_faults count
-- the attempts that ended by lease expiry or for a worker-side cause (neither spends one of
-- max_attempts; each has its own allowance); faulted_workers are the workers whose attempt failed
-- for a worker-side or unknown cause, which do not lease the run again while another can.
ALTER TABLE runs
  ADD COLUMN memory_bytes BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN preemptions INT NOT NULL DEFAULT 0,
  ADD COLUMN worker_faults INT NOT NULL DEFAULT 0,
  ADD COLUMN faulted_workers BIGINT[] NOT NULL DEFAULT '{}';

-- workers: a bench (benched_until, its reason, and the self-check due once it ends), the streak of
-- worker-side failures since its last run that trained to the end, how many benches in a row (the
-- back-off doubles with each), every attempt it ended with a worker-side or unknown failure, and
-- its device memory per slot (from WorkerInfo at Register; 0: not reported, no limit applied).
ALTER TABLE workers
  ADD COLUMN benched_until TIMESTAMPTZ,
  ADD COLUMN bench_reason TEXT NOT NULL DEFAULT '',
  ADD COLUMN self_check_due BOOLEAN NOT NULL DEFAULT false,
  ADD COLUMN fault_streak INT NOT NULL DEFAULT 0,
  ADD COLUMN bench_count INT NOT NULL DEFAULT 0,
  ADD COLUMN runs_faulted INT NOT NULL DEFAULT 0,
  ADD COLUMN memory_per_slot BIGINT NOT NULL DEFAULT 0;

-- run_events: whose fault ended the attempt (run | worker | unknown), for 'faulted' and failed
-- 'completed' events; '' otherwise.
ALTER TABLE run_events ADD COLUMN fault TEXT NOT NULL DEFAULT '';

-- What lease expiry was called before: the events say 'preempted' now.
UPDATE run_events SET kind = 'preempted' WHERE kind = 'expired';
