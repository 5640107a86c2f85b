-- Issue #22 (fleet scale): a run's spec stored as what it has of its own.
--
-- Every run of a sweep carried its whole spec in run_specs.spec (~1 KB of JSON: the complete
-- config with defaults applied, the data sets, the divergence rule), though its runs differ in a
-- few values (the cell, the grid values, the LR, the seed). Parsing and writing that JSON was most
-- of PostgreSQL's work in a 100,000-run submit. Now the sweep's first run's spec is stored once,
-- in run_spec_base, and each run's row holds in run_specs.own what differs from it
-- (pg::JsonDelta): the top-level fields whose value differs, and of `config` the fields that
-- differ; a field the base has and the run does not is a JSON null (protobuf's JSON reads null as
-- unset). run_specs.spec (the whole spec) stays for the rows stored before this migration, and is
-- NULL in rows stored after it: a replica built before it, still running beside a newer one,
-- finds no spec for a newer sweep's run and fails that call rather than hand a worker part of a
-- spec.
--
-- run_spec(base, whole, own) gives the whole spec back: the run's fields over the base's, and its
-- config fields over the base's config (`whole` for an older row); run_spec_part(..., key) is
-- run_spec(...)->key without building the rest (SQL NULL where the run has no such field). SQL
-- functions of one expression each, so the planner inlines them.
CREATE TABLE run_spec_base (
  sweep_id  BIGINT PRIMARY KEY REFERENCES sweeps (id) ON DELETE CASCADE,
  spec      JSONB NOT NULL  -- ablate.v1.RunSpec as JSON: the sweep's first run
);

ALTER TABLE run_specs ALTER COLUMN spec DROP NOT NULL;
ALTER TABLE run_specs ADD COLUMN own JSONB;  -- the run's delta from its sweep's run_spec_base

CREATE OR REPLACE FUNCTION run_spec(base JSONB, whole JSONB, own JSONB) RETURNS JSONB
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN own IS NULL THEN whole
    WHEN base IS NULL THEN own
    WHEN jsonb_typeof(base->'config') = 'object' AND jsonb_typeof(own->'config') = 'object'
      THEN base || own || jsonb_build_object('config', (base->'config') || (own->'config'))
    ELSE base || own
  END
$$;

CREATE OR REPLACE FUNCTION run_spec_part(base JSONB, whole JSONB, own JSONB, key TEXT)
RETURNS JSONB LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN own IS NULL THEN whole->key
    WHEN own->key = 'null' THEN NULL
    WHEN base IS NULL THEN own->key
    WHEN NOT own ? key THEN base->key
    WHEN key = 'config' AND jsonb_typeof(base->key) = 'object'
      AND jsonb_typeof(own->key) = 'object' THEN (base->key) || (own->key)
    ELSE own->key
  END
$$;
