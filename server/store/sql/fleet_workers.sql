-- The live fleet for estimates and budgets: workers not stopped and seen within $1 seconds
-- (two lease periods, as `ablate workers` calls them online). Device kind and WorkerInfo JSON.
SELECT device_kind, info::text AS info FROM workers
WHERE stopped_at IS NULL AND last_seen_at >= now() - make_interval(secs => $1)
ORDER BY id
