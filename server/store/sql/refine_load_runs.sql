-- Every run of sweep $1 in id order, as runs_page returns them (run_rows, migration 0019).
SELECT * FROM run_rows WHERE sweep_id = $1 ORDER BY id
