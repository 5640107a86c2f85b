-- ReportMetrics, when a batch's COPY met points already stored (a worker re-sending a report
-- whose answer it never got): the batch's points ($1 runs, $2 names, $3 steps, $4 values,
-- $5 times, $6 sequence numbers) upserted instead, exactly once per (run, name, step), the newest
-- value winning.
INSERT INTO metric_points (run_id, name, step, value, time, seq)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::float8[], $5::float8[],
                     $6::bigint[])
ON CONFLICT (run_id, name, step) DO UPDATE SET value = excluded.value, time = excluded.time,
  seq = excluded.seq
