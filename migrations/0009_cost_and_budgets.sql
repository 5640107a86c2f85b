-- Issue #25: what a sweep costs, and budgets (docs/architecture.md#cost).
--
-- run_usage: one row per attempt, the device time it held and at what price. Written by a
-- trigger on runs, so every way an attempt starts (Lease) or ends (Complete, Release, the
-- reaper's expiry, Cancel, a failure past max_attempts) is charged the same way without each
-- statement repeating it. An attempt is charged from its lease to the moment it ended, and an
-- expired one only up to its lease's expiry. `share` is the slot's share of the worker (1/slots)
-- and usd_per_hour the slot's share of the worker's declared price (NULL: undeclared); both are
-- copied at lease time, so a worker re-registering with another price does not rewrite history.
CREATE TABLE IF NOT EXISTS run_usage (
  run_id        BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  attempt       INT NOT NULL,
  sweep_id      BIGINT NOT NULL,
  worker_id     BIGINT,
  device_class  TEXT NOT NULL,
  share         DOUBLE PRECISION NOT NULL,
  usd_per_hour  DOUBLE PRECISION,
  started_at    TIMESTAMPTZ NOT NULL,
  ended_at      TIMESTAMPTZ,
  PRIMARY KEY (run_id, attempt)
);
CREATE INDEX IF NOT EXISTS run_usage_sweep ON run_usage (sweep_id);

CREATE OR REPLACE FUNCTION runs_charge_usage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.state IN ('leased', 'running')
     AND (NEW.state NOT IN ('leased', 'running') OR NEW.attempt <> OLD.attempt) THEN
    UPDATE run_usage SET ended_at = greatest(started_at,
                                             least(now(), coalesce(OLD.lease_expires_at, now())))
    WHERE run_id = OLD.id AND attempt = OLD.attempt AND ended_at IS NULL;
  END IF;
  IF NEW.state = 'leased' AND NEW.worker_id IS NOT NULL
     AND (OLD.state <> 'leased' OR NEW.attempt <> OLD.attempt) THEN
    INSERT INTO run_usage (run_id, attempt, sweep_id, worker_id, device_class, share,
                           usd_per_hour, started_at)
    SELECT NEW.id, NEW.attempt, NEW.sweep_id, w.id,
      btrim(w.device_kind || ' ' || coalesce(w.info->>'device_name', '')),
      1.0 / s.slots,
      CASE WHEN coalesce((w.info->>'price_per_hour')::float8, 0) > 0
        THEN (w.info->>'price_per_hour')::float8 / s.slots END,
      now()
    FROM workers w,
      LATERAL (SELECT least(greatest(coalesce((w.info->>'slots')::int, 1), 1), 64) AS slots) s
    WHERE w.id = NEW.worker_id
    ON CONFLICT (run_id, attempt) DO NOTHING;
  END IF;
  RETURN NULL;
END $$;

-- One run's charge over all its attempts (running ones up to now), and the class of its latest
-- attempt: what `ablate runs` shows per run (statements runs_page and refine_load_runs). One row,
-- NULLs when the run was never leased.
CREATE OR REPLACE FUNCTION run_charge(run BIGINT)
  RETURNS TABLE (device_seconds DOUBLE PRECISION, usd DOUBLE PRECISION, priced BOOLEAN,
                 device_class TEXT)
  LANGUAGE sql STABLE AS $$
  SELECT sum(extract(epoch from coalesce(ended_at, now()) - started_at) * share),
    sum(extract(epoch from coalesce(ended_at, now()) - started_at) * usd_per_hour / 3600),
    bool_and(usd_per_hour IS NOT NULL),
    (array_agg(device_class ORDER BY attempt DESC))[1]
  FROM run_usage WHERE run_id = run
$$;

DROP TRIGGER IF EXISTS runs_charge_usage ON runs;
CREATE TRIGGER runs_charge_usage AFTER UPDATE OF state, attempt ON runs FOR EACH ROW
  WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.attempt IS DISTINCT FROM NEW.attempt)
  EXECUTE FUNCTION runs_charge_usage();

-- Model FLOPs of the whole run and per token (common/cost/flops.h), set at submit: the ETA and
-- budgets sum them in SQL, and a finished run's speed transfers to runs of another size through
-- them. NULL for runs submitted before this migration (their sweeps fall back to durations).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS flops DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS flops_per_token DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS dtype TEXT;  -- the config's (speeds differ by dtype)
-- The newest finished runs with a known size: the fleet's measured speed per device class.
CREATE INDEX IF NOT EXISTS runs_speed_samples ON runs (finished_at DESC)
  WHERE state IN ('succeeded', 'diverged') AND flops IS NOT NULL;

-- `budget:` (one of the two limits; NULL without a budget). budget_runs_left is how many runs
-- Lease may still start before the budget keeper looks again: the lease statement takes one
-- under the sweep's row lock and leases nothing from a sweep at 0; the keeper recomputes it
-- from what was spent and what the running runs will still cost (server/budget_keeper.h).
-- NULL: no budget. budget_state: the keeper's last figures, as ablate.v1.Budget JSON.
ALTER TABLE sweeps ADD COLUMN IF NOT EXISTS budget_gpu_hours DOUBLE PRECISION;
ALTER TABLE sweeps ADD COLUMN IF NOT EXISTS budget_usd DOUBLE PRECISION;
ALTER TABLE sweeps ADD COLUMN IF NOT EXISTS budget_runs_left INT;
ALTER TABLE sweeps ADD COLUMN IF NOT EXISTS budget_state JSONB;
