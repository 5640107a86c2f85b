-- After a big submit: fresh statistics, so Lease walks the queue index (sweep_store.cc).
ANALYZE runs
