-- Run $1's spec as stored (migration 0014): its delta from its sweep's base, or its whole spec
-- for a row stored before that; refinement merges it over the base it holds (pg::MergeRunSpec)
-- and takes the data sets from it.
SELECT spec::text AS spec_whole, own::text AS spec_own FROM run_specs WHERE run_id = $1
