-- Folds the run_counts deltas (migration 0011) of each (sweep, shape) that has more than one row
-- into one row, dropping sums that are all zero. One statement, so a reader sees the rows before
-- or after, with the same sums; a concurrent compaction skips rows this one deleted. Returns how
-- many rows it folded.
WITH dup AS (
  SELECT sweep_id FROM run_counts GROUP BY sweep_id, device, dtype, flops_per_token, flops
  HAVING count(*) > 1),
gone AS (
  DELETE FROM run_counts c WHERE c.sweep_id IN (SELECT sweep_id FROM dup) RETURNING c.*),
folded AS (
  INSERT INTO run_counts (sweep_id, device, dtype, flops_per_token, flops, queued, leased,
    running, succeeded, diverged, failed, cancelled, skipped, refined, max_round,
    finished_seconds, finished_timed)
  SELECT sweep_id, device, dtype, flops_per_token, flops, sum(queued), sum(leased),
    sum(running), sum(succeeded), sum(diverged), sum(failed), sum(cancelled), sum(skipped),
    sum(refined), max(max_round), sum(finished_seconds), sum(finished_timed)
  FROM gone GROUP BY sweep_id, device, dtype, flops_per_token, flops
  HAVING sum(queued) <> 0 OR sum(leased) <> 0 OR sum(running) <> 0 OR sum(succeeded) <> 0
    OR sum(diverged) <> 0 OR sum(failed) <> 0 OR sum(cancelled) <> 0 OR sum(skipped) <> 0
    OR sum(refined) <> 0 OR sum(finished_timed) <> 0
  RETURNING sweep_id)
SELECT count(*) AS compacted FROM gone
