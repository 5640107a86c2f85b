-- The queue index, led by the run's device. A worker can take runs for its own device kind or
-- for 'auto'; lease.sql descends this index once for each of the two and takes the better head,
-- so a worker whose device has nothing queued finds that out in two index probes instead of
-- walking every queued run of other devices (100,000 queued cuda runs made a cpu worker's empty
-- lease take ~70 ms, issue #22).
CREATE INDEX runs_queue_device ON runs (device, priority DESC, sweep_id, order_index)
  WHERE state = 'queued';
DROP INDEX runs_queue;
