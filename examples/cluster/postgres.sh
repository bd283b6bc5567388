#!/bin/sh
# A private PostgreSQL server for an agentry cluster, from Debian's
# `postgresql` package (no system service, no docker): data and socket in
# $AGENTRY_CLUSTER_DIR (default ./.cluster), listening on 127.0.0.1:$PGPORT
# (default 5433) only, trusting local connections (a development cluster:
# give a production database passwords). Prints the store URL.
#
#   examples/cluster/postgres.sh          # start (made on first use)
#   examples/cluster/postgres.sh stop
set -eu
dir=$(mkdir -p "${AGENTRY_CLUSTER_DIR:-.cluster}" && cd "${AGENTRY_CLUSTER_DIR:-.cluster}" && pwd)
port=${PGPORT:-5433}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$bin" ]; then
    echo "postgres.sh: PostgreSQL is not installed (apt-get install postgresql)" >&2
    exit 2
fi
# initdb refuses to run as root: the server then runs as the postgres user.
as_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
case "${1:-start}" in
start)
    if [ ! -f "$dir/pg/PG_VERSION" ]; then
        mkdir -p "$dir/pg"
        [ "$(id -u)" = 0 ] && chown postgres "$dir" "$dir/pg"
        as_owner "$bin/initdb" -D "$dir/pg" -U agentry --auth=trust >/dev/null
    fi
    as_owner "$bin/pg_ctl" -D "$dir/pg" -l "$dir/pg/server.log" -w \
        -o "-p $port -k $dir/pg -c listen_addresses=127.0.0.1" start >/dev/null
    as_owner "$bin/psql" -h 127.0.0.1 -p "$port" -U agentry -d postgres -qAt \
        -c "SELECT 1 FROM pg_database WHERE datname = 'agentry'" | grep -q 1 ||
        as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U agentry agentry
    echo "postgres://agentry@127.0.0.1:$port/agentry"
    ;;
stop)
    as_owner "$bin/pg_ctl" -D "$dir/pg" -w stop >/dev/null
    ;;
*)
    echo "usage: postgres.sh [start|stop]" >&2
    exit 2
    ;;
esac
