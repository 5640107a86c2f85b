-- A run added by refinement to sweep $1: cell $2, seed $3, priority $4, device $5, max attempts
-- $6, steps $7, round $8, spec $9 (JSON: its delta from the sweep's run_spec_base, or the whole
-- spec for a sweep without one), event message $10, model FLOPs $11, FLOPs per token
-- $12, dtype $13 and estimated device memory $14 (common/cost/memory.h). Returns its id (no row:
-- the run is already there, or the sweep is not).
-- The sweep's row is locked as a foreign key's check would (runs has none, migration 0015), so a
-- concurrent delete of the sweep waits for this to commit, or this finds no sweep and adds none.
WITH sw AS (SELECT id FROM sweeps WHERE id = $1 FOR KEY SHARE),
ins AS (INSERT INTO runs (sweep_id, cell, seed, order_index, priority, device,
  max_attempts, total_steps, refine_round, flops, flops_per_token, dtype, memory_bytes)
  SELECT sw.id, $2, $3, coalesce((SELECT max(order_index) + 1 FROM runs WHERE sweep_id =
$1), 0), $4, $5, $6, $7, $8, $11, $12, $13, $14 FROM sw
  ON CONFLICT (sweep_id, cell, seed) DO NOTHING RETURNING id),
s AS (INSERT INTO run_specs (run_id, own) SELECT id, $9::jsonb FROM ins),
e AS (INSERT INTO run_events (run_id, kind, attempt, message)
  SELECT id, 'refined', 0, $10 FROM ins)
SELECT id FROM ins
