-- What each active sweep's attempts were charged, by device class (running attempts up to now):
-- sweep id, class, device-seconds, dollars (priced attempts), whether any attempt was priced.
SELECT u.sweep_id, u.device_class,
  sum(extract(epoch from coalesce(u.ended_at, now()) - u.started_at) * u.share) AS device_seconds,
  coalesce(sum(extract(epoch from coalesce(u.ended_at, now()) - u.started_at) * u.usd_per_hour
               / 3600), 0) AS usd,
  bool_or(u.usd_per_hour IS NOT NULL) AS priced
FROM run_usage u JOIN sweeps s ON s.id = u.sweep_id
WHERE s.state = 'active' GROUP BY u.sweep_id, u.device_class
