-- `ablate workers unbench NAME`: lifts worker $1's bench (docs/server.md#failures). It may lease
-- at once, without its self-check, and its streak of worker-side failures and of benches start
-- again from 0. Returns its id (no row: no worker has that name).
UPDATE workers SET benched_until = NULL, bench_reason = '', self_check_due = false,
  fault_streak = 0, bench_count = 0
WHERE name = $1 RETURNING id
