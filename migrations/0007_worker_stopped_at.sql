-- A worker that stops cleanly says so (WorkerService.Deregister): it is offline from that moment,
-- not two lease periods later when its silence gives it away. NULL: running, or stopped without
-- saying (a crash, SIGKILL), which last_seen_at still catches. Register clears it.
ALTER TABLE workers ADD COLUMN IF NOT EXISTS stopped_at TIMESTAMPTZ;
