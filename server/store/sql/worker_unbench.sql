-- `ablate workers unbench NAME`: lifts worker $1's bench (docs/server.md#failures). It may lease
-- at once, without its self-check, and its streak of worker-side failures and of benches start
-- again from 0. Only a worker that is benched (its bench runs, or it owes its self-check) is
-- changed. Returns its id and whether it was benched (no row: no worker has that name).
WITH old AS (
  SELECT id, coalesce(benched_until > now(), false) OR self_check_due AS benched
  FROM workers WHERE name = $1 FOR UPDATE),
upd AS (
  UPDATE workers w SET benched_until = NULL, bench_reason = '', self_check_due = false,
    fault_streak = 0, bench_count = 0
  FROM old WHERE w.id = old.id AND old.benched RETURNING w.id)
SELECT old.id, old.benched FROM old
