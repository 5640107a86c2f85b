-- Issue #22: metric ingest at COPY speed (docs/architecture.md#metric-ingest).
--
-- metric_points loses its foreign key to runs. PostgreSQL checks a foreign key with one lookup
-- per inserted row, an AFTER trigger each, and for points that cost more than storing the row
-- (200,000 points: 4.4 s with the key, 1.9 s without, on the 2-core development VM). Ingest needs
-- no such check: every batch updates its run's row under the lease fence in the same transaction
-- (server/store/sql/ingest_fence.sql), so the run exists and cannot be deleted before the batch
-- commits. Deleting runs still takes their points, by one statement per DELETE (a
-- statement-level trigger over the deleted rows) instead of the cascade's one per run.
ALTER TABLE metric_points DROP CONSTRAINT IF EXISTS metric_points_run_id_fkey;

CREATE OR REPLACE FUNCTION runs_delete_points() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM metric_points m USING gone g WHERE m.run_id = g.id;
  RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS runs_delete_points ON runs;
CREATE TRIGGER runs_delete_points AFTER DELETE ON runs REFERENCING OLD TABLE AS gone
  FOR EACH STATEMENT EXECUTE FUNCTION runs_delete_points();
