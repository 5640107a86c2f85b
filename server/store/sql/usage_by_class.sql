-- What sweep $1's attempts were charged, by device class: runs, attempts holding a lease now,
-- device-seconds, dollars (priced attempts), whether every attempt was priced. A running attempt
-- is charged up to now (returned last, as unix seconds, in every row).
SELECT device_class, count(DISTINCT run_id), count(*) FILTER (WHERE ended_at IS NULL),
  sum(extract(epoch from coalesce(ended_at, now()) - started_at) * share),
  coalesce(sum(extract(epoch from coalesce(ended_at, now()) - started_at) * usd_per_hour / 3600),
           0),
  bool_and(usd_per_hour IS NOT NULL), extract(epoch from now())
FROM run_usage WHERE sweep_id = $1 GROUP BY device_class ORDER BY 4 DESC
