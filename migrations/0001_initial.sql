-- The coordinator's whole state. One concept explains delivery: the lease (run, attempt, expiry).
-- A run is handed out by setting state = 'leased', attempt = attempt + 1 and lease_expires_at;
-- every worker write names (run, attempt) and is refused unless that attempt is still current.

CREATE TABLE sweeps (
  id            BIGSERIAL PRIMARY KEY,
  name          TEXT NOT NULL,
  state         TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'finished', 'cancelled')),
  spec_yaml     TEXT NOT NULL,
  file_name     TEXT NOT NULL,
  priority      INT NOT NULL DEFAULT 0,
  max_attempts  INT NOT NULL,
  axes          TEXT[] NOT NULL,
  submitted_by  TEXT NOT NULL DEFAULT '',
  created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
  finished_at   TIMESTAMPTZ
);
CREATE INDEX sweeps_name ON sweeps (name, id DESC);

CREATE TABLE workers (
  id              BIGSERIAL PRIMARY KEY,
  name            TEXT NOT NULL UNIQUE,
  device_kind     TEXT NOT NULL,
  info            JSONB NOT NULL,
  registered_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
  last_seen_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
  current_run_id  BIGINT,
  runs_completed  INT NOT NULL DEFAULT 0
);

-- priority is copied from the sweep so the lease query walks one partial index in queue order.
-- The run's spec (its config, ~1 KB) lives in run_specs: every lease, heartbeat, report and
-- completion rewrites the runs row, and a narrow row keeps those writes cheap.
CREATE TABLE runs (
  id                 BIGSERIAL PRIMARY KEY,
  sweep_id           BIGINT NOT NULL REFERENCES sweeps (id) ON DELETE CASCADE,
  cell               TEXT NOT NULL,
  seed               BIGINT NOT NULL,
  order_index        INT NOT NULL,
  priority           INT NOT NULL,
  device             TEXT NOT NULL,
  state              TEXT NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'leased', 'running', 'succeeded', 'diverged',
                                      'failed', 'cancelled')),
  attempt            INT NOT NULL DEFAULT 0,
  max_attempts       INT NOT NULL,
  worker_id          BIGINT REFERENCES workers (id),
  lease_expires_at   TIMESTAMPTZ,
  step               BIGINT NOT NULL DEFAULT 0,
  total_steps        BIGINT NOT NULL,
  latest_train_loss  DOUBLE PRECISION,
  latest_val_loss    DOUBLE PRECISION,
  latest_max_attn_logit DOUBLE PRECISION,
  tokens_per_second  DOUBLE PRECISION,
  result             JSONB,
  error              TEXT NOT NULL DEFAULT '',
  created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
  started_at         TIMESTAMPTZ,
  finished_at        TIMESTAMPTZ,
  UNIQUE (sweep_id, cell, seed)
);
CREATE INDEX runs_queue ON runs (priority DESC, sweep_id, order_index) WHERE state = 'queued';
CREATE INDEX runs_leases ON runs (lease_expires_at) WHERE state IN ('leased', 'running');
-- "Does the sweep have unfinished runs?" without walking its finished ones.
CREATE INDEX runs_unfinished ON runs (sweep_id) WHERE state IN ('queued', 'leased', 'running');

CREATE TABLE run_specs (
  run_id  BIGINT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
  spec    JSONB NOT NULL  -- ablate.v1.RunSpec as JSON; run_id and sweep_id filled at lease
);

-- Keyed (run, name, step): a resumed attempt's points replace the earlier attempt's.
-- seq is set on every insert or replacement (one value per ReportMetrics batch): followers
-- (GetRunMetrics follow) read "what changed since seq N", which also catches values a resumed
-- attempt rewrote. Reports for one run are serialised by the fence's row lock on the run, so
-- per run seq follows commit order.
CREATE SEQUENCE metric_points_seq;
CREATE TABLE metric_points (
  run_id  BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  name    TEXT NOT NULL,
  step    BIGINT NOT NULL,
  value   DOUBLE PRECISION NOT NULL,
  time    DOUBLE PRECISION NOT NULL,
  seq     BIGINT NOT NULL DEFAULT nextval('metric_points_seq'),
  PRIMARY KEY (run_id, name, step)
);
CREATE INDEX metric_points_changes ON metric_points (run_id, seq);

CREATE TABLE checkpoints (
  run_id      BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  step        BIGINT NOT NULL,
  sha256      TEXT NOT NULL,
  size_bytes  BIGINT NOT NULL,
  attempt     INT NOT NULL,
  created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, step)
);

CREATE TABLE datasets (
  sha256      TEXT PRIMARY KEY,
  path        TEXT NOT NULL,
  size_bytes  BIGINT NOT NULL,
  created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE tokens (
  id            BIGSERIAL PRIMARY KEY,
  name          TEXT NOT NULL,
  role          TEXT NOT NULL CHECK (role IN ('worker', 'user', 'admin')),
  sha256        TEXT NOT NULL UNIQUE,
  created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
  revoked_at    TIMESTAMPTZ
);

CREATE TABLE run_events (
  id       BIGSERIAL PRIMARY KEY,
  run_id   BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  time     TIMESTAMPTZ NOT NULL DEFAULT now(),
  kind     TEXT NOT NULL,
  attempt  INT NOT NULL,
  worker   TEXT NOT NULL DEFAULT '',
  message  TEXT NOT NULL DEFAULT ''
);
CREATE INDEX run_events_run ON run_events (run_id, id);
