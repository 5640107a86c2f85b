-- Every replica refreshes the sweeps' metric labels; one at a time assigns them.
SELECT pg_advisory_xact_lock(hashtext('ablate.sweep_metric_labels'))
