-- ReportMetrics, the points of one ingest batch's accepted requests, in COPY's binary format
-- (server/store/ingest_store.cc builds the rows, server/store/copy.cc sends them; the batch's
-- fence ran first, in the same transaction). A point already stored aborts the COPY and its
-- transaction, and the batch is written again with ingest_upsert.sql instead.
COPY metric_points (run_id, name, step, value, time, seq) FROM STDIN (FORMAT binary)
