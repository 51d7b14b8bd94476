#!/usr/bin/env bash
# Regenerates proxy/layout/hot.ld, the order of the release binary's code
# (docs/speed.md says why and what it saves).
#
#   PERF_WORK=/tmp/refusal-guard-perf tools/code_layout.sh
#
# Builds the `refusal-guard` binary and the `proxy` example without the
# layout, runs each under callgrind through ../shared/perf/bench.sh's
# sequence (its readiness probe, correctness check, warm-up, C=1 and C=64
# runs against its mock, then SIGTERM), and writes the functions they ran,
# the binary's first. Needs valgrind, and the harness's mock and load
# generator built in PERF_WORK (any bench.sh run builds them there).
# Run it again after a change of toolchain, dependencies or the request
# path: a function the script no longer names is laid out as before.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${PERF_WORK:?PERF_WORK must name the work folder of bench.sh (its target/release has mock_upstream and loadgen)}"
harness=$PERF_WORK/target/release
command -v valgrind > /dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 2; }
for tool in mock_upstream loadgen; do
  [ -x "$harness/$tool" ] || { echo "$harness/$tool is missing: run ../shared/perf/bench.sh once" >&2; exit 2; }
done

work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2> /dev/null || true; rm -rf "$work"' EXIT

# One build each: built together, the binary would share the example's
# dependency features (dev-dependencies turn more on), so its generic
# instances would carry the example's hashes, not those of the binary
# users build.
REFUSAL_GUARD_CODE_LAYOUT=off cargo build --release --quiet -p refusal-guard-proxy --bin refusal-guard
cp target/release/refusal-guard "$work/refusal-guard"
REFUSAL_GUARD_CODE_LAYOUT=off cargo build --release --quiet -p refusal-guard-proxy --example proxy
cp target/release/examples/proxy "$work/proxy"

upstream_port=19301
"$harness/mock_upstream" --listen "127.0.0.1:$upstream_port" --events 200 --delay-us 0 > /dev/null 2>&1 &
pids+=($!)

# profile NAME PORT: one callgrind run of $work/NAME through bench.sh's sequence.
profile() {
  local name=$1 port=$2 url="http://127.0.0.1:$2" i
  local load=("$harness/loadgen" --model claude-mock --api-key sk-perf-0123456789abcdef0123456789abcdef
    --timeout 10 --grace 5 --events 200 --body-kb 20 --url "$url")
  valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$work/$name.out" \
    "$work/$name" --listen "127.0.0.1:$port" --upstream "http://127.0.0.1:$upstream_port" --quiet \
    > "$work/$name.log" 2>&1 &
  local pid=$!
  for i in $(seq 300); do
    curl -s -o /dev/null -m 2 -X POST "$url/v1/messages" && break
    sleep 0.2
  done
  "${load[@]}" -c 4 -d 3 --bytes-check > /dev/null 2>&1
  "${load[@]}" -c 16 -d 3 > /dev/null 2>&1
  "${load[@]}" -c 1 -d 4 > /dev/null 2>&1
  "${load[@]}" -c 64 -d 6 > /dev/null 2>&1
  kill -TERM "$pid"
  wait "$pid" || true
}
profile refusal-guard 19302
profile proxy 19303

python3 tools/code_layout.py "$work/refusal-guard=$work/refusal-guard.out" "$work/proxy=$work/proxy.out" \
  > "$work/hot.ld"
mv "$work/hot.ld" proxy/layout/hot.ld
echo "proxy/layout/hot.ld written; rebuild to apply it"
