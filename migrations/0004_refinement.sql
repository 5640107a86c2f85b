-- Issue #11: a sweep may refine its LR boundaries (new runs added by the server, marked with the
-- round that added them) and prune runs above divergence (a new terminal state, 'skipped').
-- Safe on a database with rows (defaults for the new NOT NULL columns) and idempotent.
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_state_check;
ALTER TABLE runs ADD CONSTRAINT runs_state_check
  CHECK (state IN ('queued', 'leased', 'running', 'succeeded', 'diverged', 'failed', 'cancelled',
                   'skipped'));
-- 0: a run of the submitted grid; k >= 1: added by refinement round k.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS refine_round INT NOT NULL DEFAULT 0;
-- The sweep file's `refine:` as ablate.v1.RefineStatus JSON (axis, boundaries, until_ratio,
-- max_new_runs); NULL when the sweep does not refine. Kept in columns rather than re-parsed
-- from spec_yaml, since every Complete of such a sweep reads them.
ALTER TABLE sweeps ADD COLUMN IF NOT EXISTS refine JSONB;
ALTER TABLE sweeps ADD COLUMN IF NOT EXISTS prune_above_divergence BOOLEAN NOT NULL DEFAULT false;
