#!/bin/sh
# Run once by the postgres image when it creates its database (docker-entrypoint-initdb.d):
# a role that may only read interlude's tables, for the metrics exporter. The exporter then
# holds no password that can change a run. Tables made later by `interlude db upgrade` (as
# POSTGRES_USER) are readable too, by the default privileges granted here.
set -eu
reader="${METRICS_DB_USER:-interlude_metrics}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v reader="$reader" -v password="$METRICS_DB_PASSWORD" \
    -v owner="$POSTGRES_USER" -v database="$POSTGRES_DB" <<'SQL'
CREATE ROLE :"reader" LOGIN PASSWORD :'password';
GRANT CONNECT ON DATABASE :"database" TO :"reader";
GRANT USAGE ON SCHEMA public TO :"reader";
GRANT SELECT ON ALL TABLES IN SCHEMA public TO :"reader";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public GRANT SELECT ON TABLES TO :"reader";
ALTER ROLE :"reader" SET default_transaction_read_only = on;
SQL
