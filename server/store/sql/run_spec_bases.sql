-- The base run spec (JSON) of each of sweeps $1 that has a run_spec_base (migration 0014): what
-- the run_rows whose spec_own is a delta are merged over (pg::LoadBaseSpecs, pg::MergeRunSpec).
SELECT sweep_id, spec::text AS spec FROM run_spec_base WHERE sweep_id = ANY($1::bigint[])
