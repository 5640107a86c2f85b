-- The newest $2 sweeps (active ones only when $1), as sweep_get returns them (counts from
-- run_counts).
SELECT s.id, s.name, s.state, s.spec_yaml, s.file_name, extract(epoch from s.created_at),
  extract(epoch from s.finished_at), s.priority, array_to_json(s.axes)::text, s.submitted_by,
  c.queued, c.leased, c.running, c.succeeded, c.diverged, c.failed, c.cancelled, c.total,
  c.avg_seconds, c.skipped, c.refined, c.rounds, s.refine::text, s.prune_above_divergence,
  s.budget_gpu_hours, s.budget_usd, s.budget_state::text
FROM sweeps s, LATERAL (SELECT
  coalesce(sum(queued), 0)::bigint AS queued, coalesce(sum(leased), 0)::bigint AS leased,
  coalesce(sum(running), 0)::bigint AS running,
  coalesce(sum(succeeded), 0)::bigint AS succeeded,
  coalesce(sum(diverged), 0)::bigint AS diverged, coalesce(sum(failed), 0)::bigint AS failed,
  coalesce(sum(cancelled), 0)::bigint AS cancelled,
  coalesce(sum(queued + leased + running + succeeded + diverged + failed + cancelled
               + skipped), 0)::bigint AS total,
  coalesce(sum(skipped), 0)::bigint AS skipped, coalesce(sum(refined), 0)::bigint AS refined,
  coalesce(max(max_round), 0) AS rounds,
  (sum(finished_seconds) / nullif(sum(finished_timed), 0))::float8 AS avg_seconds
  FROM run_counts WHERE sweep_id = s.id) c
WHERE (NOT $1 OR s.state = 'active') ORDER BY s.id DESC LIMIT $2
