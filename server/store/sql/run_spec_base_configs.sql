-- The base config (JSON) of each of sweeps $1 that has a run_spec_base (migration 0014): what the
-- runs_page rows whose config is a delta are merged over (pg::LoadBaseConfigs).
SELECT sweep_id, (spec->'config')::text FROM run_spec_base WHERE sweep_id = ANY($1::bigint[])
