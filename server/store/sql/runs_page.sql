-- Runs of sweep $1 (every sweep when 0) in states $2 (any when empty), newest first as
-- sweep_list orders sweeps (the highest sweep id, then its last run first): $3 of them after
-- skipping $4, as run_rows (migration 0019) gives them, the columns pg::RunFromRow reads.
-- The page's ids are picked first, walking the runs_sweep_order index (the sweep id as a range,
-- so a generic plan still uses it), and only those rows are joined: a skipped row never touches
-- run_specs or run_charge.
SELECT * FROM run_rows
WHERE id IN (SELECT id FROM runs
  WHERE sweep_id BETWEEN CASE WHEN $1 = 0 THEN 0 ELSE $1 END
    AND CASE WHEN $1 = 0 THEN 9223372036854775807 ELSE $1 END
    AND (cardinality($2::text[]) = 0 OR state = ANY($2::text[]))
  ORDER BY sweep_id DESC, order_index DESC LIMIT $3 OFFSET $4)
ORDER BY sweep_id DESC, order_index DESC
