-- The newest $2 sweeps (active ones only when $1), as sweep_get returns them (sweep_rows,
-- migration 0019).
SELECT * FROM sweep_rows WHERE (NOT $1 OR state = 'active') ORDER BY id DESC LIMIT $2
