-- A chunk of sweep $1's runs (priority $2, max attempts $3) and their specs, one array element a
-- run: cells $4, seeds $5, order indexes $6, devices $7, specs $8 (JSON: each run's delta from
-- its sweep's run_spec_base, migration 0014), steps $9, model FLOPs
-- $10, FLOPs per token $11, dtypes $12 and estimated device memory $13 (common/cost/memory.h).
-- Ids come from the sequence in array order.
WITH u AS (SELECT * FROM unnest($4::text[], $5::bigint[], $6::int[], $7::text[],
  $8::text[], $9::bigint[], $10::float8[], $11::float8[], $12::text[], $13::bigint[])
  AS u(cell, seed, ord, device, spec, steps, flops, fpt, dtype, memory)),
ins AS (INSERT INTO runs (sweep_id, cell, seed, order_index, priority, device,
  max_attempts, total_steps, flops, flops_per_token, dtype, memory_bytes)
  SELECT $1, u.cell, u.seed, u.ord, $2, u.device, $3, u.steps, u.flops, u.fpt, u.dtype, u.memory
  FROM u
  RETURNING id, order_index)
INSERT INTO run_specs (run_id, own)
SELECT ins.id, u.spec::jsonb FROM ins JOIN u ON u.ord = ins.order_index
