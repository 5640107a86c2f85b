-- Issue #22 (fleet scale): a cell's val loss folded in the database.
--
-- `ablate status` (ListCells, statement cells_page) and the Sweep dashboard's per-cell series
-- (statement stats_active_cells) fold a cell's runs into one mean val loss; before, the CLI and
-- Prometheus did it from every run. One rule, here, for both: a succeeded run counts its final
-- loss (RunResult.final_val_loss in runs.result), a diverged run counts none, any other run its
-- latest val loss once it has one; NaN and infinities count as none. An SQL function of one
-- expression, so the planner inlines it.
CREATE OR REPLACE FUNCTION run_loss(state TEXT, result JSONB, latest_val_loss DOUBLE PRECISION)
RETURNS DOUBLE PRECISION LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN state = 'succeeded' THEN CASE
      WHEN result->>'final_val_loss' IN ('NaN', 'Infinity', '-Infinity') THEN NULL
      ELSE (result->>'final_val_loss')::float8 END
    WHEN state = 'diverged' THEN NULL
    -- PostgreSQL orders NaN above Infinity: this keeps finite positive values only.
    WHEN latest_val_loss > 0 AND latest_val_loss < 'Infinity'::float8 THEN latest_val_loss
  END
$$;
