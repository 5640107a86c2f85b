-- Hardening, third round: the step each of a run's latest values was measured at, so that a
-- report of an older step (a re-sent batch, a worker replaying its spool out of order) cannot
-- overwrite a newer value: val_loss 1.5 at step 900 then 9.0 at step 300 showed 9.0. The
-- ingest fence (server/store/sql/ingest_fence.sql) sets a value only from a step at or after
-- its column's; a new attempt (Lease) starts them over at -1, since the points after its resume
-- step are gone. Rows from before read -1: the next report sets them.
ALTER TABLE runs
  ADD COLUMN IF NOT EXISTS latest_train_step BIGINT NOT NULL DEFAULT -1,
  ADD COLUMN IF NOT EXISTS latest_val_step BIGINT NOT NULL DEFAULT -1,
  ADD COLUMN IF NOT EXISTS latest_logit_step BIGINT NOT NULL DEFAULT -1,
  ADD COLUMN IF NOT EXISTS latest_probes_step BIGINT NOT NULL DEFAULT -1;
