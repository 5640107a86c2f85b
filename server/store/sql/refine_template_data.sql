-- The data sets in run $1's stored spec (over its sweep's base, migration 0014).
SELECT run_spec_part(b.spec, rs.spec, rs.own, 'data')::text FROM run_specs rs
JOIN runs r ON r.id = rs.run_id LEFT JOIN run_spec_base b ON b.sweep_id = r.sweep_id
WHERE rs.run_id = $1
