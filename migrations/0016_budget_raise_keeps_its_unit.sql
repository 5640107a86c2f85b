-- A budget has one limit (budget_gpu_hours or budget_usd; the other NULL), but before this
-- migration `ablate budget --raise` set the other to 1e12 too (least() ignores NULLs, so
-- least(NULL + N, 1e12) was 1e12): a raised gpu_hours budget got a $1e12 limit, which the keeper
-- reads first, so it no longer stopped the sweep. The statement is fixed
-- (server/store/sql/budget_raise.sql); this takes the added limit off sweeps already raised. A raise
-- can reach exactly 1e12 only from NULL (a sweep file's limit is at most 1e9), so where one limit is
-- 1e12 and the other is not, the 1e12 is the artefact. budget_state is the keeper's cache and is
-- rewritten at its next round. Idempotent: a second run finds no such rows.
UPDATE sweeps SET budget_usd = NULL
WHERE budget_gpu_hours IS NOT NULL AND budget_usd = 1e12 AND budget_gpu_hours <> 1e12;
UPDATE sweeps SET budget_gpu_hours = NULL
WHERE budget_usd IS NOT NULL AND budget_gpu_hours = 1e12 AND budget_usd <> 1e12;
