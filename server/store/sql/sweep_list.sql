-- The newest $2 sweeps (active ones only when $1), as sweep_get returns them.
SELECT s.id, s.name, s.state, s.spec_yaml, s.file_name, extract(epoch from s.created_at),
  extract(epoch from s.finished_at), s.priority, array_to_json(s.axes)::text, s.submitted_by,
  c.queued, c.leased, c.running, c.succeeded, c.diverged, c.failed, c.cancelled, c.total,
  c.avg_seconds, c.skipped, c.refined, c.rounds, s.refine::text, s.prune_above_divergence,
  s.budget_gpu_hours, s.budget_usd, s.budget_state::text
FROM sweeps s, LATERAL (SELECT
  count(*) FILTER (WHERE state = 'queued') AS queued,
  count(*) FILTER (WHERE state = 'leased') AS leased,
  count(*) FILTER (WHERE state = 'running') AS running,
  count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
  count(*) FILTER (WHERE state = 'diverged') AS diverged,
  count(*) FILTER (WHERE state = 'failed') AS failed,
  count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
  count(*) AS total,
  count(*) FILTER (WHERE state = 'skipped') AS skipped,
  count(*) FILTER (WHERE refine_round > 0) AS refined,
  coalesce(max(refine_round), 0) AS rounds,
  avg(extract(epoch from finished_at - started_at)) FILTER (
    WHERE state IN ('succeeded', 'diverged', 'failed') AND started_at IS NOT NULL)
    AS avg_seconds
  FROM runs WHERE sweep_id = s.id) c
WHERE (NOT $1 OR s.state = 'active') ORDER BY s.id DESC LIMIT $2
