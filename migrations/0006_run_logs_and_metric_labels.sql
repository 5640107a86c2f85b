-- Issue #15. run_logs: the progress lines a worker's trainer prints ("step 100  loss 3.21 ...
-- 5200 tok/s"), sent with ReportLogs so `ablate logs RUN -f` can follow a run from anywhere.
-- ReportLogs keeps the newest 2,000 lines per run (older ones are deleted in the same
-- transaction), so a long run costs a bounded number of rows; seq is the follow cursor.
CREATE TABLE IF NOT EXISTS run_logs (
  seq      BIGSERIAL PRIMARY KEY,
  run_id   BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  attempt  INT NOT NULL,
  step     BIGINT NOT NULL,
  time     DOUBLE PRECISION NOT NULL,
  line     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS run_logs_run_seq ON run_logs (run_id, seq);

-- The `sweep` label of a sweep's Prometheus series, fixed when the exporter first sees the sweep
-- active: its name, or name#id if a live sweep already holds the name. Computed on every refresh
-- instead, a second sweep of the same name renamed the first one's series mid-run. Cleared when
-- the sweep ends (NULL), so a retried sweep is labelled afresh.
ALTER TABLE sweeps ADD COLUMN IF NOT EXISTS metric_label TEXT;
