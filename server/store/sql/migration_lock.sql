-- Transaction-scoped: released at commit or rollback, even if the process dies halfway.
SELECT pg_advisory_xact_lock($1)
