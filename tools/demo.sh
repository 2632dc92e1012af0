#!/usr/bin/env bash
# `make demo`: the agent and Envoy on this machine, one API key sent over its
# limit. Needs `make tools build` (the Makefile's demo target does both).
#
#   DEMO_REQUESTS (30)      how many requests to send
#   DEMO_PATH (/demo/hello) the path; deploy/rules.yaml's demo-per-api-key
#                           rule allows 10 a minute per API key under /demo
#   DEMO_API_KEY (demo-key) the x-api-key header
#
# Logs and the responses go to run/. Both processes are stopped on exit,
# whatever happens.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
ENVOY_BIN=${MESHLIMIT_ENVOY:-$ROOT/.venv/bin/envoy}
AGENT_BIN=${MESHLIMIT_AGENT_BIN:-$ROOT/target/release/meshlimit-agent}
RULES=deploy/rules.yaml
REQUESTS=${DEMO_REQUESTS:-30}
DEMO_PATH=${DEMO_PATH:-/demo/hello}
API_KEY=${DEMO_API_KEY:-demo-key}
AGENT=127.0.0.1:8081
PROXY=127.0.0.1:10000
ADMIN=127.0.0.1:9901
RUN=$ROOT/run

die() { echo "demo: $*" >&2; exit 1; }

for file in "$AGENT_BIN" "$ENVOY_BIN" target/wasm32-wasip1/release/meshlimit_filter.wasm "$RULES"; do
    [ -e "$file" ] || die "$file is missing: run \`make tools build\` (or \`make demo\`)"
done
for port in 8081 10000 10001 9901; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        die "127.0.0.1:$port is already in use (another demo running?)"
    fi
done

rm -rf "$RUN"
mkdir -p "$RUN"
PIDS=()

# The deployment secret the agent and the filter share (the agent refuses
# callers without it); a fresh one per run, in the environment of both.
MESHLIMIT_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export MESHLIMIT_SECRET

stop_all() {
    local pid deadline
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    deadline=$((SECONDS + 5))
    for pid in "${PIDS[@]}"; do
        while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
}
trap stop_all EXIT

# wait_ready NAME PID URL LOG: polls URL until it answers 200, for at most 30 s;
# stops early if the process exits.
wait_ready() {
    local name=$1 pid=$2 url=$3 log=$4 deadline=$((SECONDS + 30))
    until [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$url")" = 200 ]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 30 "$log" >&2
            die "$name exited before it was ready (log: $log)"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            tail -n 30 "$log" >&2
            die "$name not ready after 30 s ($url; log: $log)"
        fi
        sleep 0.1
    done
    echo "demo: $name ready ($url)"
}

"$AGENT_BIN" run --rules "$RULES" --listen "$AGENT" >"$RUN/agent.log" 2>&1 &
PIDS+=($!)
wait_ready agent "$!" "http://$AGENT/readyz" "$RUN/agent.log"

"$ENVOY_BIN" -c envoy.yaml --concurrency 2 >"$RUN/envoy.log" 2>&1 &
PIDS+=($!)
wait_ready envoy "$!" "http://$ADMIN/ready" "$RUN/envoy.log"

# Envoy is ready before its filters have fetched the rules (they poll the agent
# every 100 ms until they have them): wait until every VM has rules (one per
# worker, --concurrency 2, plus one on the main thread).
deadline=$((SECONDS + 10))
until [ "$(curl -s "http://$ADMIN/stats?filter=meshlimit.rules_ready_vms" | awk -F': ' '{print $2}')" -ge 3 ] 2>/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || die "the filter has no rules after 10 s (log: $RUN/envoy.log)"
    sleep 0.1
done
echo "demo: filter has the agent's rules"

echo
echo "demo: $REQUESTS requests to http://$PROXY$DEMO_PATH with x-api-key: $API_KEY"
allowed=0 limited=0 other=0
for i in $(seq "$REQUESTS"); do
    code=$(curl -s --max-time 5 -D "$RUN/headers" -o "$RUN/body" -w '%{http_code}' \
        -H "x-api-key: $API_KEY" "http://$PROXY$DEMO_PATH") || code=000
    case $code in
        200) allowed=$((allowed + 1)) ;;
        429)
            limited=$((limited + 1))
            if [ ! -e "$RUN/limited-response.txt" ]; then
                cat "$RUN/headers" "$RUN/body" >"$RUN/limited-response.txt"
            fi
            ;;
        *) other=$((other + 1)); echo "demo: request $i answered $code" ;;
    esac
done
rm -f "$RUN/headers" "$RUN/body"

echo "demo: allowed $allowed, limited $limited, other $other"
if [ -e "$RUN/limited-response.txt" ]; then
    echo
    echo "demo: the first 429, as the client saw it:"
    tr -d '\r' <"$RUN/limited-response.txt"
    echo
fi

# The filter reports the decisions it took locally once a second: wait (5 s at
# most) until the agent's counters stop moving before showing them.
metrics() { curl -s --max-time 2 "http://$AGENT/metrics" | grep '^meshlimit_decisions_total' || true; }
previous="" deadline=$((SECONDS + 5))
while [ "$SECONDS" -lt "$deadline" ]; do
    current=$(metrics)
    [ -n "$current" ] && [ "$current" = "$previous" ] && break
    previous=$current
    sleep 1.2
done
echo
echo "demo: agent metrics (meshlimit_decisions_total):"
metrics

[ "$limited" -gt 0 ] || die "no request was limited: see $RUN/agent.log and $RUN/envoy.log"
