-- ReportMetrics: under the fence (run $1, attempt $2, token digest $3, lease held), the latest
-- losses ($4..$9: has/value pairs for train, val, max attention logit), step $10 (refused past
-- total_steps), probes $15 (a JSON object merged into latest_probes), and the points
-- ($11..$14: names, steps, values, times) upserted. The fence is an UPDATE of the run row, so a
-- concurrent re-lease (which deletes points past the resume step) waits for this batch.
-- Returns (runs fenced: 0 or 1, points written).
WITH fence AS (
  UPDATE runs SET
    latest_train_loss = CASE WHEN $4 THEN $5::float8 ELSE latest_train_loss END,
    latest_val_loss = CASE WHEN $6 THEN $7::float8 ELSE latest_val_loss END,
    latest_max_attn_logit =
      CASE WHEN $8 THEN $9::float8 ELSE latest_max_attn_logit END,
    step = greatest(step, $10),
    latest_probes = latest_probes || $15::jsonb
  WHERE id = $1 AND attempt = $2 AND lease_token_sha256 = $3 AND state IN ('leased', 'running')
    AND total_steps >= $10
  RETURNING id, nextval('metric_points_seq') AS seq),
ins AS (
  INSERT INTO metric_points (run_id, name, step, value, time, seq)
  SELECT fence.id, p.name, p.step, p.value, p.time, fence.seq FROM fence,
    unnest($11::text[], $12::bigint[], $13::float8[], $14::float8[])
      AS p(name, step, value, time)
  ON CONFLICT (run_id, name, step) DO UPDATE SET value = excluded.value,
    time = excluded.time, seq = excluded.seq RETURNING 1)
SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM ins)
