-- When worker name $1 becomes free ($2: the silence that frees it, in seconds): (seconds from
-- now, as UTC text).
SELECT ceil(extract(epoch from last_seen_at + make_interval(secs => $2) - now())) AS free_in,
  to_char((last_seen_at + make_interval(secs => $2)) AT TIME ZONE 'UTC',
  'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS free_at
FROM workers WHERE name = $1
