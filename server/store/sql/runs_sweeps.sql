-- The sweep of each of the runs $1 that exist: CancelSweep given run ids and no sweep (`ablate
-- cancel --run ID`; run ids are global).
SELECT id, sweep_id FROM runs WHERE id = ANY($1::bigint[]) ORDER BY id
