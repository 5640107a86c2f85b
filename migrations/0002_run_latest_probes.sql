-- The newest value of each aggregate probe of a run (attn_entropy, kurtosis, grad_norm, ...),
-- kept next to latest_max_attn_logit so /metrics can export ablate_run_probe{probe=...} without
-- scanning metric_points.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS latest_probes jsonb NOT NULL DEFAULT '{}'::jsonb;
