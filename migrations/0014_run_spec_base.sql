-- Issue #22 (fleet scale): a run's spec stored as what it has of its own.
--
-- Every run of a sweep carried its whole spec in run_specs (~1 KB of JSON: the complete config
-- with defaults applied, the data sets, the divergence rule), though its runs differ in a few
-- values (the cell, the grid values, the LR, the seed). Parsing and writing that JSON was most of
-- PostgreSQL's work in a 100,000-run submit. Now the sweep's first run's spec is stored once, in
-- run_spec_base, and each run's row in run_specs holds what differs from it (pg::SpecDelta): the
-- top-level fields whose value differs, and of `config` the fields that differ; a field the base
-- has and the run does not is a JSON null (protobuf's JSON reads null as unset).
--
-- run_spec(base, own) gives the whole spec back: the run's fields over the base's, and its config
-- fields over the base's config; run_spec_part(base, own, key) is run_spec(base, own)->key
-- without building the rest. A run with no base row (stored before this migration) is its own
-- spec. SQL functions of one expression each, so the planner inlines them.
CREATE TABLE run_spec_base (
  sweep_id  BIGINT PRIMARY KEY REFERENCES sweeps (id) ON DELETE CASCADE,
  spec      JSONB NOT NULL  -- ablate.v1.RunSpec as JSON: the sweep's first run
);

CREATE OR REPLACE FUNCTION run_spec(base JSONB, own JSONB) RETURNS JSONB
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN base IS NULL THEN own
    WHEN jsonb_typeof(base->'config') = 'object' AND jsonb_typeof(own->'config') = 'object'
      THEN base || own || jsonb_build_object('config', (base->'config') || (own->'config'))
    ELSE base || own
  END
$$;

CREATE OR REPLACE FUNCTION run_spec_part(base JSONB, own JSONB, key TEXT) RETURNS JSONB
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN base IS NULL THEN own->key
    WHEN own IS NULL OR own->key = 'null' THEN NULL
    WHEN NOT own ? key THEN base->key
    WHEN key = 'config' AND jsonb_typeof(base->key) = 'object'
      AND jsonb_typeof(own->key) = 'object' THEN (base->key) || (own->key)
    ELSE own->key
  END
$$;
