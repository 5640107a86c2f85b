-- NOTIFY each channel $1[i] with payload $2[i].
SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS t(c, p)
