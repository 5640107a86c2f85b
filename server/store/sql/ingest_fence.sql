-- ReportMetrics, the fence of one ingest batch (server/store/ingest_store.cc): for each request
-- (run $1, attempt $2, token digest $3: lease_held, migration 0018) whose points stay within the
-- run's last step ($10, the request's largest step), the latest losses ($4..$9, has/value pairs:
-- train, val, max attention logit) each where its step ($12..$14) is at or after the step its
-- column was last set from (migration 0032: an older step never overwrites a newer value), the
-- step, and the probes ($11, JSON objects merged into latest_probes, measured at step $15) are
-- set, and the request gets a sequence number for its points. The UPDATE locks each run's row,
-- so a concurrent re-lease (which deletes points past the resume step) or delete waits for the
-- batch to commit. A batch holds each run at most once. Returns (run_id, seq) per request
-- accepted.
UPDATE runs r SET
  latest_train_loss = CASE WHEN v.has_train AND v.train_step >= r.latest_train_step THEN v.train
    ELSE r.latest_train_loss END,
  latest_train_step = CASE WHEN v.has_train AND v.train_step >= r.latest_train_step
    THEN v.train_step ELSE r.latest_train_step END,
  latest_val_loss = CASE WHEN v.has_val AND v.val_step >= r.latest_val_step THEN v.val
    ELSE r.latest_val_loss END,
  latest_val_step = CASE WHEN v.has_val AND v.val_step >= r.latest_val_step THEN v.val_step
    ELSE r.latest_val_step END,
  latest_max_attn_logit = CASE WHEN v.has_logit AND v.logit_step >= r.latest_logit_step
    THEN v.logit ELSE r.latest_max_attn_logit END,
  latest_logit_step = CASE WHEN v.has_logit AND v.logit_step >= r.latest_logit_step
    THEN v.logit_step ELSE r.latest_logit_step END,
  step = greatest(r.step, v.max_step),
  latest_probes = CASE WHEN v.probes_step >= r.latest_probes_step
    THEN r.latest_probes || v.probes ELSE r.latest_probes END,
  latest_probes_step = greatest(r.latest_probes_step, v.probes_step)
FROM unnest($1::bigint[], $2::int[], $3::text[], $4::bool[], $5::float8[], $6::bool[],
            $7::float8[], $8::bool[], $9::float8[], $10::bigint[], $11::jsonb[], $12::bigint[],
            $13::bigint[], $14::bigint[], $15::bigint[])
  AS v(id, attempt, digest, has_train, train, has_val, val, has_logit, logit, max_step, probes,
       train_step, val_step, logit_step, probes_step)
WHERE r.id = v.id AND lease_held(r, v.attempt, v.digest) AND r.total_steps >= v.max_step
RETURNING r.id AS run_id, nextval('metric_points_seq') AS seq
