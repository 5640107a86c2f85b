-- For the rest of this transaction only (set_config's is_local), run prepared statements on
-- their generic plan. The lease statement is a large CTE whose planning costs more than its
-- execution; since its memory-fit and faulted-worker parameters (#38) PostgreSQL's plan cache
-- often keeps choosing a custom plan, replanning it on every call: Lease -> Complete fell from
-- ~900 to ~600 runs/s in bench/queue, and back to ~860 with this (docs/server.md, After the
-- store's second pass).
SELECT set_config('plan_cache_mode', 'force_generic_plan', true) AS plan_cache_mode
