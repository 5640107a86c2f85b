-- Issue #22 (fleet scale): a 100,000-run submit without 200,000 foreign-key checks.
--
-- PostgreSQL checks a foreign key with one lookup per inserted row (an AFTER ROW trigger each).
-- runs -> sweeps and run_specs -> runs were 0.8 s of PostgreSQL's 2.0 s of CPU in a 100,000-run
-- submit (scale_bench), for checks that cannot fail: runs are inserted by the submit that
-- inserted their sweep, in the same transaction, and by refinement, which takes the sweep's row
-- lock the key's check took (refine_insert_run: no sweep, no run); a run's spec is inserted in
-- the statement that inserts its run, with the id it returned. What the keys' ON DELETE CASCADE did, statement-level
-- triggers do, one statement per DELETE (as for metric_points, migration 0010): deleting sweeps
-- deletes their runs, and deleting runs their specs (beside their points). run_spec_base (one
-- row a sweep) keeps its key.
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_sweep_id_fkey;
ALTER TABLE run_specs DROP CONSTRAINT IF EXISTS run_specs_run_id_fkey;

CREATE OR REPLACE FUNCTION sweeps_delete_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM runs r USING gone g WHERE r.sweep_id = g.id;
  RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS sweeps_delete_runs ON sweeps;
CREATE TRIGGER sweeps_delete_runs AFTER DELETE ON sweeps REFERENCING OLD TABLE AS gone
  FOR EACH STATEMENT EXECUTE FUNCTION sweeps_delete_runs();

-- The runs' statement-level delete trigger (migration 0010) takes their specs too.
CREATE OR REPLACE FUNCTION runs_delete_points() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM metric_points m USING gone g WHERE m.run_id = g.id;
  DELETE FROM run_specs s USING gone g WHERE s.run_id = g.id;
  RETURN NULL;
END
$$;
