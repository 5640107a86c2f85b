-- Heartbeat: run $1, locked: (state, attempt, whether attempt $2 with token digest $3 is the
-- lease's holder, whether it holds the lease: lease_holder and lease_held, migration 0018).
SELECT state, attempt, lease_holder(runs, $2, $3) AS holder,
  lease_held(runs, $2, $3) AS held
FROM runs WHERE id = $1 FOR UPDATE
