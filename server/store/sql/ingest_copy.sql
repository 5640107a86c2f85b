-- ReportMetrics, the points of one ingest batch's fenced requests, in COPY's binary format
-- (server/store/ingest_store.cc writes the rows; the batch's fence ran first, in the same
-- transaction). A point already stored aborts the COPY, and the batch is upserted instead.
COPY metric_points (run_id, name, step, value, time, seq) FROM STDIN (FORMAT binary)
