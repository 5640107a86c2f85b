-- How many runs of sweep $1 (every sweep when 0) are in states $2 (any when empty): the total
-- beside a runs_page page.
SELECT count(*) FROM runs r WHERE ($1 = 0 OR r.sweep_id = $1) AND
  (cardinality($2::text[]) = 0 OR r.state = ANY($2::text[]))
