-- What sweep $1's attempts were charged, by device class: runs, attempts holding a lease now,
-- device-seconds, dollars (priced attempts), whether every attempt was priced. A running attempt
-- is charged up to now (as_of: that now, in unix seconds, in every row).
SELECT device_class, count(DISTINCT run_id) AS runs,
  count(*) FILTER (WHERE ended_at IS NULL) AS running,
  sum(extract(epoch from coalesce(ended_at, now()) - started_at) * share) AS device_seconds,
  coalesce(sum(extract(epoch from coalesce(ended_at, now()) - started_at) * usd_per_hour / 3600),
           0) AS usd,
  bool_and(usd_per_hour IS NOT NULL) AS priced, extract(epoch from now()) AS as_of
FROM run_usage WHERE sweep_id = $1 GROUP BY device_class ORDER BY device_seconds DESC
