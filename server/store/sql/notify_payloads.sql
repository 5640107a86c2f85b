-- NOTIFY channel $1 once with each payload in $2.
SELECT pg_notify($1, d) FROM unnest($2::text[]) AS d
