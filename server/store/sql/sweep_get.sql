-- Sweep $1 with its run counts: sweep_rows (migration 0019), the columns pg::SweepFromRow in
-- pg_codec.cc reads. The counts are the sum of the sweep's run_counts rows, so this reads a
-- handful of rows however many runs the sweep has.
SELECT * FROM sweep_rows WHERE id = $1
