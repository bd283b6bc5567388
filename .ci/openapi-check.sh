#!/usr/bin/env bash
# agentry serve's OpenAPI document, checked from outside: docs/openapi.json is
# valid OpenAPI 3.1 (openapi-spec-validator), and schemathesis drives the real
# server from it — every answer's status, content type, headers and body must
# be what the document says, no 500, schema-invalid requests refused, every
# route refusing a request without a token. (docs/openapi.json being the
# document the code generates, and real answers validating against it, are
# tests: crates/agentry-cli/tests/cli/serve_openapi.rs.)
# Usage: .ci/openapi-check.sh TARGET/debug/agentry; Python tools are installed
# once into $AGENTRY_CI_TOOLS (default ~/.cache/agentry-ci) at pinned versions.
set -euo pipefail
cd "$(dirname "$0")/.."
agentry=$(realpath "$1")
tools="${AGENTRY_CI_TOOLS:-$HOME/.cache/agentry-ci}/py"
export PYTHONPATH="$tools"
if ! python3 -c 'import schemathesis, openapi_spec_validator' 2>/dev/null ||
  [ "$(python3 -c 'import schemathesis; print(schemathesis.__version__)')" != 4.32.5 ]; then
  python3 -m pip install --quiet --disable-pip-version-check --upgrade --target "$tools" \
    "schemathesis==4.32.5" "openapi-spec-validator==0.7.2"
fi
python3 -m openapi_spec_validator docs/openapi.json

work=$(mktemp -d)
token="openapi-check-$RANDOM$RANDOM"
echo "ops $(printf %s "$token" | sha256sum | cut -d' ' -f1)" > "$work/tokens"
printf '[auth]\ntokens_file = "tokens"\n' > "$work/serve.toml"
"$agentry" serve --config "$work/serve.toml" --store "$work/runs.db" --addr 127.0.0.1:0 \
  2> "$work/serve.log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$work"' EXIT
base=""
for _ in $(seq 100); do
  base=$(sed -n 's/^agentry: serve: listening on //p' "$work/serve.log")
  [ -n "$base" ] && break
  sleep 0.1
done
[ -n "$base" ] || { echo "agentry serve did not start:"; cat "$work/serve.log"; exit 1; }
# A live event-driven run, so the run routes are tried on a run that exists.
run_id=$(curl -sf "$base/runs" -H "Authorization: Bearer $token" --json \
  '{"goal": "answer every message", "budget": {"max_steps": 100000, "deadline": "600s"},
    "driver": {"mode": "events"}, "progress": {"window": 0},
    "script": {"turns": [{"final": "ok"}], "then": "repeat_last"}}' |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["run_id"])')
# A schema-valid request may still be refused for what a schema cannot say (an
# agent name the server does not configure, a script that does not parse):
# that one check is off. A live run's event stream never ends: it is asked of
# a run that does not exist.
cat > "$work/schemathesis.toml" <<TOML
[checks.positive_data_acceptance]
enabled = false

[parameters]
"path.id" = "$run_id"

[[operations]]
include-name = "GET /runs/{id}/events"
parameters = { "path.id" = "no-such-run" }
TOML
"$tools/bin/schemathesis" --config-file "$work/schemathesis.toml" run docs/openapi.json \
  --url "$base" -H "Authorization: Bearer $token" \
  --max-examples 25 --generation-deterministic --request-timeout 10 --no-color
