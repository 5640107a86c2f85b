-- The newest sweep named $1.
SELECT id FROM sweeps WHERE name = $1 ORDER BY id DESC LIMIT 1
