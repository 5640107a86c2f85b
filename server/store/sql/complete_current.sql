-- After a fenced-off Complete or faulted attempt: run $1's state, and whether attempt $2 with
-- token digest $3 is its lease's holder (lease_holder, migration 0018; the state aside), to
-- accept a retry whose outcome is already there.
SELECT state, lease_holder(runs, $2, $3) AS holder FROM runs WHERE id = $1
