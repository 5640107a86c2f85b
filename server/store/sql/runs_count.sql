-- How many runs of sweep $1 (every sweep when 0) are in states $2 (any when empty): the total
-- beside a runs_page page, summed from run_counts (migration 0011) rather than counted.
SELECT coalesce(sum(CASE WHEN cardinality($2::text[]) = 0
    THEN queued + leased + running + succeeded + diverged + failed + cancelled + skipped
    ELSE CASE WHEN 'queued' = ANY($2::text[]) THEN queued ELSE 0 END
      + CASE WHEN 'leased' = ANY($2::text[]) THEN leased ELSE 0 END
      + CASE WHEN 'running' = ANY($2::text[]) THEN running ELSE 0 END
      + CASE WHEN 'succeeded' = ANY($2::text[]) THEN succeeded ELSE 0 END
      + CASE WHEN 'diverged' = ANY($2::text[]) THEN diverged ELSE 0 END
      + CASE WHEN 'failed' = ANY($2::text[]) THEN failed ELSE 0 END
      + CASE WHEN 'cancelled' = ANY($2::text[]) THEN cancelled ELSE 0 END
      + CASE WHEN 'skipped' = ANY($2::text[]) THEN skipped ELSE 0 END END), 0)::bigint AS total
FROM run_counts WHERE $1 = 0 OR sweep_id = $1
