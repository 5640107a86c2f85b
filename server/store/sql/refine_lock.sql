-- The per-sweep refinement lock: class $1, sweep $2.
SELECT pg_advisory_xact_lock($1, $2)
