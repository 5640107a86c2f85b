-- Lease, after lease_worker: the next queued run for worker $1 if it holds fewer than $4 leases,
-- leased for $2 seconds under the token digest $3. Only a run that fits its device memory per
-- slot $5 (0: not reported, any run), and not one whose attempt failed on this worker for a
-- worker-side or unknown cause while its hold lasts (fault_hold_until, migration 0030) and
-- another leasing, unbenched worker (one that asked Lease within the lease period) could take it
-- (docs/server.md#failures). Without a checkpoint the attempt starts over and every earlier
-- point goes (step > -1); with one, the points after its step go.
-- A sweep with a budget leases only while its budget_runs_left is above 0 (migration 0009).
-- Returns one row: device kind, then run id, sweep id, attempt, expiry, the run's spec as stored
-- (its sweep's base, its delta, or its whole spec from before migration 0014: pg::MergeRunSpec
-- merges them), checkpoint step, sha256 and size (NULL when no run was leased), and the leases
-- the worker held before, as a count and a list.
WITH w AS (SELECT name, device_kind FROM workers WHERE id = $1),
held AS (SELECT array_agg(id ORDER BY id) AS ids, count(*) AS n FROM runs
  WHERE worker_id = $1 AND state IN ('leased', 'running')),
-- The queue's head for each device the worker can run ('auto' and its own kind), one descent
-- of runs_queue_device each (migration 0012), then the better of the two. Both heads are locked;
-- the one not taken stays locked until this statement commits, and a concurrent Lease skips it.
next AS (
  SELECT c.id, c.sweep_id
  FROM (SELECT DISTINCT dev FROM unnest(ARRAY['auto', (SELECT device_kind FROM w)]) d(dev)) d,
  LATERAL (
    SELECT r.id, r.sweep_id, r.priority, r.order_index FROM runs r
    WHERE r.state = 'queued' AND r.device = d.dev
    AND (SELECT n FROM held) < $4
    AND ($5::bigint <= 0 OR r.memory_bytes <= $5::bigint)
    AND NOT (r.faulted_workers @> ARRAY[$1::bigint] AND r.fault_hold_until > now() AND EXISTS (
      SELECT 1 FROM workers o WHERE o.id <> $1 AND NOT o.id = ANY(r.faulted_workers)
      AND o.stopped_at IS NULL AND o.last_lease_at >= now() - make_interval(secs => $2)
      AND coalesce(o.benched_until <= now(), true) AND NOT o.self_check_due
      AND (r.device = 'auto' OR o.device_kind = r.device)
      AND (o.memory_per_slot <= 0 OR r.memory_bytes <= o.memory_per_slot)))
    AND NOT EXISTS (SELECT 1 FROM sweeps s WHERE s.id = r.sweep_id AND s.budget_runs_left <= 0)
    ORDER BY r.priority DESC, r.sweep_id, r.order_index LIMIT 1 FOR UPDATE SKIP LOCKED) c
  ORDER BY c.priority DESC, c.sweep_id, c.order_index LIMIT 1),
-- A sweep with a budget: take one of the runs its budget keeper allows, under the sweep's row
-- lock (a concurrent Lease that finds none left leases nothing this time).
bud AS (
  UPDATE sweeps s SET budget_runs_left = s.budget_runs_left - 1 FROM next
  WHERE s.id = next.sweep_id AND s.budget_runs_left > 0 RETURNING s.id),
ok AS (
  SELECT next.id FROM next WHERE EXISTS (SELECT 1 FROM bud) OR NOT EXISTS (
    SELECT 1 FROM sweeps s WHERE s.id = next.sweep_id AND s.budget_runs_left IS NOT NULL)),
ck AS (
  SELECT c.step, c.sha256, c.size_bytes FROM checkpoints c, ok
  WHERE c.run_id = ok.id ORDER BY c.step DESC LIMIT 1),
upd AS (
  UPDATE runs r SET state = 'leased', attempt = r.attempt + 1, worker_id = $1,
    lease_expires_at = now() + make_interval(secs => $2),
    started_at = coalesce(r.started_at, now()), error = '',
    step = coalesce((SELECT step FROM ck), 0), lease_token_sha256 = $3,
    latest_train_step = -1, latest_val_step = -1, latest_logit_step = -1,
    latest_probes_step = -1
  FROM ok WHERE r.id = ok.id
  RETURNING r.id, r.sweep_id, r.attempt, r.lease_expires_at),
d AS (DELETE FROM metric_points WHERE run_id = (SELECT id FROM upd)
  AND step > coalesce((SELECT step FROM ck), -1)),
e AS (INSERT INTO run_events (run_id, kind, attempt, worker, message)
  SELECT id, 'leased', attempt, (SELECT name FROM w),
    coalesce('resume from step ' || (SELECT step FROM ck), '') FROM upd),
wu AS (UPDATE workers SET last_seen_at = now(), last_lease_at = now(),
  current_run_id = (SELECT id FROM upd) WHERE id = $1)
SELECT (SELECT device_kind FROM w) AS device_kind, upd.id AS run_id, upd.sweep_id, upd.attempt,
  extract(epoch from upd.lease_expires_at) AS expires_at,
  sp.spec_base, sp.spec_whole, sp.spec_own,
  ck.step AS resume_step, ck.sha256 AS resume_sha256, ck.size_bytes AS resume_size_bytes,
  (SELECT n FROM held) AS held,
  coalesce((SELECT array_to_string(ids, ', ') FROM held), '') AS held_ids
FROM (SELECT 1) one LEFT JOIN upd ON true LEFT JOIN ck ON true
LEFT JOIN LATERAL (SELECT b.spec::text AS spec_base, rs.spec::text AS spec_whole,
    rs.own::text AS spec_own
  FROM run_specs rs LEFT JOIN run_spec_base b ON b.sweep_id = upd.sweep_id
  WHERE rs.run_id = upd.id) sp ON true
