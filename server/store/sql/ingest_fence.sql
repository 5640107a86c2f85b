-- ReportMetrics, the fence of one ingest batch (server/store/ingest_store.cc): for each request
-- (run $1, attempt $2, token digest $3: lease_held, migration 0018) whose points stay within the
-- run's last step ($10, the request's largest step), the latest losses ($4..$9, has/value pairs:
-- train, val, max attention logit), the step, and the probes ($11, JSON objects merged into
-- latest_probes) are set, and the request gets a sequence number for its points. The UPDATE locks
-- each run's row, so a concurrent re-lease (which deletes points past the resume step) or delete
-- waits for the batch to commit. A batch holds each run at most once. Returns (run_id, seq) per
-- request accepted.
UPDATE runs r SET
  latest_train_loss = CASE WHEN v.has_train THEN v.train ELSE r.latest_train_loss END,
  latest_val_loss = CASE WHEN v.has_val THEN v.val ELSE r.latest_val_loss END,
  latest_max_attn_logit = CASE WHEN v.has_logit THEN v.logit ELSE r.latest_max_attn_logit END,
  step = greatest(r.step, v.max_step),
  latest_probes = r.latest_probes || v.probes
FROM unnest($1::bigint[], $2::int[], $3::text[], $4::bool[], $5::float8[], $6::bool[],
            $7::float8[], $8::bool[], $9::float8[], $10::bigint[], $11::jsonb[])
  AS v(id, attempt, digest, has_train, train, has_val, val, has_logit, logit, max_step, probes)
WHERE r.id = v.id AND lease_held(r, v.attempt, v.digest) AND r.total_steps >= v.max_step
RETURNING r.id AS run_id, nextval('metric_points_seq') AS seq
