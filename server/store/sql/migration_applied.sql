SELECT 1 FROM schema_migrations WHERE version = $1
