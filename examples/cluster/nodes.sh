#!/bin/sh
# N `agentry serve` nodes of one cluster, on the Postgres store of
# postgres.sh (or $AGENTRY_STORE): on 127.0.0.1 ports $BASE_PORT+1 ...
# (default 8081, 8082, ...), each logging to $AGENTRY_CLUSTER_DIR/node-PORT.log.
# Extra arguments go to every node (e.g. --config serve.toml). Without a
# token (AGENTRY_TOKEN or serve.toml's tokens file) the nodes serve loopback
# callers with --no-auth.
#
#   examples/cluster/nodes.sh 3           # start three nodes
#   examples/cluster/nodes.sh stop        # stop every node (SIGTERM: they drain)
set -eu
dir=$(mkdir -p "${AGENTRY_CLUSTER_DIR:-.cluster}" && cd "${AGENTRY_CLUSTER_DIR:-.cluster}" && pwd)
agentry=${AGENTRY:-agentry}
store=${AGENTRY_STORE:-postgres://agentry@127.0.0.1:${PGPORT:-5433}/agentry}
base=${BASE_PORT:-8080}
if [ "${1:-3}" = stop ]; then
    [ -f "$dir/nodes.pid" ] && xargs kill < "$dir/nodes.pid" 2>/dev/null || true
    rm -f "$dir/nodes.pid"
    exit 0
fi
n=${1:-3}
[ $# -gt 0 ] && shift
auth=--no-auth
[ -n "${AGENTRY_TOKEN:-}" ] && auth=
i=1
while [ "$i" -le "$n" ]; do
    port=$((base + i))
    "$agentry" serve $auth --addr "127.0.0.1:$port" --store "$store" "$@" \
        > "$dir/node-$port.log" 2>&1 &
    echo $! >> "$dir/nodes.pid"
    i=$((i + 1))
done
# Each node prints its address once it listens.
i=1
while [ "$i" -le "$n" ]; do
    port=$((base + i))
    tries=0
    until grep -q "listening on" "$dir/node-$port.log" 2>/dev/null; do
        tries=$((tries + 1))
        if [ "$tries" -gt 300 ]; then
            echo "nodes.sh: node on port $port did not start:" >&2
            cat "$dir/node-$port.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    echo "http://127.0.0.1:$port"
    i=$((i + 1))
done
