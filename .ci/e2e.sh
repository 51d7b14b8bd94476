#!/usr/bin/env bash
# End-to-end checks of the proxy with real clients, all on loopback:
#   1. the demo (no network) shows a rescue;
#   2. the load check: 200 concurrent streams x 3 rounds through the proxy
#      binary against the mock upstream; reports the proxy's peak RSS;
#   3. the soak: 1,000 concurrent streams (half rescued) plus 200 clients
#      that leave mid-hold, three rounds in each mode (default, --keepalive,
#      --live-thinking); checks own bytes, no continuation for a client that
#      left, file descriptors back to idle, peak RSS bounded per stream;
#      prints fds and RSS (leaks: tests/proxy_memory.rs counts allocations);
#   4. examples/agent (reqwest + the layer) through `refusal-guard --simulate
#      --strict`, and `refusal-guard report` on the refusal it logged;
#   5. the Claude Code CLI headless through `refusal-guard --simulate --strict`,
#      installed from npm (REFUSAL_GUARD_E2E_SKIP_CLAUDE=1 skips it on
#      purpose, outside CI): its first turn is rescued, its second
#      (`--continue`) is not refused again, and a third through a fresh
#      simulator is logged under the first turn's conversation key;
#      every simulator here is strict (--strict): it holds what it receives
#      (the clients' requests, the guard's rescues) to the providers'
#      documented rules, and a step fails if it counted a violation (its
#      admin listener's refusal_guard_contract_violations_total, which no
#      log filter hides; a control run first shows the check failing on a
#      violation with RUST_LOG=error), and each must exit 0 when stopped;
#   6. the Codex CLI (`codex exec`, installed from npm;
#      REFUSAL_GUARD_E2E_SKIP_CODEX=1 skips it on purpose, outside CI)
#      through the `refusal-guard` binary in front of the e2e harness's
#      mock: its first request fails with a Responses `response.failed`
#      `cyber_policy`, the proxy's fallback chain answers, and Codex ends
#      with the fallback's answer; the refusal log has the record;
#   7. Claude Code headless in Bedrock gateway mode (refusal-guard
#      --bedrock-region signing for it) against a mock Bedrock that checks
#      every signature with botocore and every request with the crate's
#      request contract (tools' contract-check);
#   8. pytest with the pinned official anthropic, openai and google-genai
#      SDKs (tests/e2e/requirements.txt, installed into .venv), among them
#      one routed proxy serving Claude Code, the openai SDK and google-genai
#      at once, each refused and recovered on its own upstream
#      (tests/e2e/test_routes.py, given the CLI of step 5), fallbacks to
#      other providers read by each SDK (tests/e2e/test_cross_provider.py),
#      a Gemini copyright stop served by the chain with no rescue note
#      (tests/e2e/test_genai_sdk.py),
#      two tenants behind one proxy, their allowlists and unknown keys
#      (tests/e2e/test_tenants.py),
#      and the operations
#      tests: /metrics with the Prometheus parser, the dashboard in Debian's
#      chromium (.ci/test installs it) through Playwright.
# The programs: the `refusal-guard` binary, examples/ and tools/ (the
# harness, the load check, the soak). Exits non-zero on any failure; pytest
# finding no tests counts as a failure. Under CI (any value of CI but empty,
# 0 or false) a check that cannot run (npm or chromium missing) fails the
# run; elsewhere it is skipped, named, and listed again at the end.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=$TARGET/debug
EXAMPLES=$TARGET/debug/examples
CLAUDE_CODE_VERSION=2.1.332
CODEX_VERSION=0.171.0
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }

# Whether this is CI: CI set to anything but empty, 0 or false (CI=true,
# CI=1, CI=yes all count).
in_ci() {
    case "${CI:-}" in
        "" | 0 | false) return 1 ;;
        *) return 0 ;;
    esac
}

# A check that cannot run here: fails the run under CI (green means every
# check ran); elsewhere it is skipped with the reason, and named again at
# the end.
SKIPPED=()
cannot_run() {
    if in_ci; then
        echo "FAILED (CI=${CI}, so every check must run): $*"
        exit 1
    fi
    echo "SKIPPED: $*"
    SKIPPED+=("$*")
}

# Waits (10 s at most) for a proxy started with `--listen 127.0.0.1:0` to
# say where it listens in its stderr file ERR; sets LISTEN_URL.
wait_listening() {
    local err=$1
    for _ in $(seq 100); do
        LISTEN_URL=$(grep -o 'listening on http://[0-9.:]*' "$err" | head -1 | sed 's/listening on //') || true
        [ -n "$LISTEN_URL" ] && return 0
        sleep 0.1
    done
    echo "refusal-guard did not start:"; cat "$err"; return 1
}

# Starts `refusal-guard --simulate --strict [FLAGS]` NAME on a free loopback
# port, with an admin listener; sets SIM_URL and SIM_PID. Its stderr goes to
# $WORK/proxy-NAME.err, its admin URL to $WORK/admin-NAME, its pid to
# $WORK/pid-NAME.
STRICT=()
start_simulated_proxy() {
    local err=$WORK/proxy-$1.err name=$1
    shift
    "$BIN/refusal-guard" --simulate --strict --listen 127.0.0.1:0 --admin 127.0.0.1:0 \
        --log "$WORK/refusals-$name.jsonl" "$@" 2>"$err" &
    SIM_PID=$!
    PIDS+=("$SIM_PID")
    STRICT+=("$name")
    echo "$SIM_PID" >"$WORK/pid-$name"
    wait_listening "$err"
    SIM_URL=$LISTEN_URL
    for _ in $(seq 100); do
        grep -oE 'admin on http://[0-9.]+:[0-9]+' "$err" | head -1 | sed 's/admin on //' >"$WORK/admin-$name"
        [ -s "$WORK/admin-$name" ] && return 0
        sleep 0.1
    done
    echo "refusal-guard ($name) announced no admin listener:"; cat "$err"; return 1
}

# Fails (status 1) if the strict simulator NAME answered a request with a
# contract error (a client's request or the guard's rewrite broke a rule the
# real provider keeps), as its admin listener counts it: never a log line,
# which RUST_LOG may filter. A counter that is not there fails too.
no_violations() {
    local admin counted
    admin=$(cat "$WORK/admin-$1")
    counted=$(curl -s --max-time 10 "$admin/metrics" \
        | awk '$1 == "refusal_guard_contract_violations_total" { print $2 }')
    if [ -z "$counted" ]; then
        echo "the strict simulator ($1) has no refusal_guard_contract_violations_total at $admin/metrics"
        return 1
    fi
    if [ "$counted" != 0 ]; then
        echo "the strict simulator ($1) received $counted request(s) the real API rejects:"
        cat "$WORK/proxy-$1.err"
        return 1
    fi
}

# Stops the strict simulator NAME (SIGTERM) and fails unless it exits 0: a
# strict simulator that answered any request with a contract error exits 3.
stop_simulated_proxy() {
    local pid status=0
    pid=$(cat "$WORK/pid-$1")
    kill -TERM "$pid"
    wait "$pid" || status=$?
    if [ "$status" != 0 ]; then
        echo "the strict simulator ($1) exited with status $status:"; cat "$WORK/proxy-$1.err"
        return 1
    fi
}

step "build the binary, the examples and the tools"
# One build for all (the crate's features resolved once).
cargo build --workspace --all-features --bins --examples

step "demo (no network, no key)"
"$EXAMPLES/demo" | tee "$WORK/demo.out"
grep -q 'outcome":"rescued"' "$WORK/demo.out"

step "load: 200 concurrent streams through the proxy"
"$BIN/load" --requests 200 --rounds 3

step "soak: 1,000 streams + 200 leaving clients, every mode"
"$BIN/soak"

step "the guard's timeout flags reach the layer: a silent upstream gets a 504 in the API's shape"
# An upstream that accepts and never answers; the proxy binary with a 1 s
# head timeout must answer 504 in Anthropic's shape well before curl gives up.
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
conns = []
end = time.time() + 30
while time.time() < end:
    s.settimeout(max(0.1, end - time.time()))
    try: conns.append(s.accept()[0])
    except OSError: pass
' > "$WORK/silent.port" &
PIDS+=("$!")
for _ in $(seq 50); do [ -s "$WORK/silent.port" ] && break; sleep 0.1; done
SILENT_PORT=$(head -1 "$WORK/silent.port")
"$BIN/refusal-guard" --listen 127.0.0.1:0 --upstream "http://127.0.0.1:$SILENT_PORT" \
    --upstream-head-timeout 1 --log off 2>"$WORK/proxy-silent.err" &
PIDS+=("$!")
for _ in $(seq 100); do
    SILENT_URL=$(grep -o 'listening on http://[0-9.:]*' "$WORK/proxy-silent.err" | head -1 | sed 's/listening on //') || true
    [ -n "$SILENT_URL" ] && break
    sleep 0.1
done
status=$(curl -s -o "$WORK/silent.body" -w '%{http_code}' --max-time 20 "$SILENT_URL/v1/messages" \
    -H 'content-type: application/json' \
    -d '{"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}')
echo "status $status: $(cat "$WORK/silent.body")"
[ "$status" = 504 ]
grep -q '"timeout_error"' "$WORK/silent.body"

step "the violation check itself: a strict simulator logging errors only still fails it"
# The control of every check below: with RUST_LOG=error the simulator's
# warning naming the rule is filtered out; the counter and the status are not.
RUST_LOG=error start_simulated_proxy control
status=$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 "$SIM_URL/v1/messages" \
    -H 'content-type: application/json' \
    -d '{"model":"claude-opus-4-7","messages":[{"role":"user","content":"no max_tokens"}]}')
[ "$status" = 400 ] || { echo "a request without max_tokens got $status"; exit 1; }
if no_violations control >/dev/null; then
    echo "no_violations passed a simulator that answered a broken request"; exit 1
fi
if grep -q 'A2' "$WORK/proxy-control.err"; then
    echo "RUST_LOG=error did not filter the warning: the control proves nothing"; exit 1
fi
control_status=0
kill -TERM "$SIM_PID"; wait "$SIM_PID" || control_status=$?
[ "$control_status" = 3 ] || { echo "the control exited $control_status, not 3"; exit 1; }
echo "a violation with RUST_LOG=error: counted on /metrics, exit status 3"
STRICT=()

step "examples/agent through refusal-guard --simulate"
start_simulated_proxy agent
ANTHROPIC_API_KEY=dummy-key "$EXAMPLES/agent" --base-url "$SIM_URL" "Check my SSH config" | tee "$WORK/agent.out"
grep -q 'Simulated answer' "$WORK/agent.out"
no_violations agent || exit 1
grep -q 'rescued(cyber)' "$WORK/proxy-agent.err"
grep -q 'guarded request settled' "$WORK/proxy-agent.err"

step "--quiet: no line per request on stderr"
start_simulated_proxy quiet --quiet
for _ in 1 2 3; do
    curl -s -o /dev/null --max-time 20 "$SIM_URL/v1/messages" -H 'content-type: application/json' \
        -d '{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"Check my SSH config"}]}'
done
for _ in $(seq 50); do [ -s "$WORK/refusals-quiet.jsonl" ] && break; sleep 0.1; done
[ -s "$WORK/refusals-quiet.jsonl" ]
if grep -E 'settled|POST /v1/messages' "$WORK/proxy-quiet.err"; then
    echo "--quiet still wrote per-request lines"; exit 1
fi
no_violations quiet || exit 1

step "refusal-guard report: the agent's rescued refusal"
"$BIN/refusal-guard" report --log "$WORK/refusals-agent.jsonl" | tee "$WORK/report.out"
grep -q '^1 refusal recorded; 1 recovered by a fallback or a rescue (100%)\.$' "$WORK/report.out"
grep -Eq '^  [0-9T:.-]+Z  claude-opus-4-7  \[cyber\]  rescued: Simulated refusal' "$WORK/report.out"
"$BIN/refusal-guard" report --log "$WORK/refusals-agent.jsonl" --json >"$WORK/report.json"
python3 - "$WORK/report.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert report["total"] == 1 and report["recovered"] == 1, report
assert report["by_outcome"] == {"rescued": 1}, report["by_outcome"]
assert report["by_category"] == {"cyber": 1}, report["by_category"]
print("report --json: one rescued cyber refusal")
PY

step "Claude Code CLI headless through refusal-guard --simulate"
# Set by run_claude_code when the CLI is installed; the Bedrock step uses it.
CLAUDE=""
# One headless turn of the CLI against URL in the step's HOME: claude_turn
# URL NAME ARGS...; its JSON output goes to $WORK/NAME.json.
claude_turn() {
    local url=$1 name=$2
    shift 2
    HOME="$WORK/claude-home" ANTHROPIC_BASE_URL="$url" ANTHROPIC_API_KEY=sk-ant-dummy \
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 \
        timeout 120 "$CLAUDE" "$@" --output-format json \
        </dev/null >"$WORK/$name.json" 2>"$WORK/$name.err" || {
            echo "Claude Code failed:"; cat "$WORK/$name.err" "$WORK/$name.json"; exit 1; }
}
run_claude_code() {
    if ! npm install --prefix "$WORK/claude" --no-audit --no-fund \
            "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" >"$WORK/npm.log" 2>&1; then
        tail -20 "$WORK/npm.log"
        cannot_run "the Claude Code CLI: npm could not install @anthropic-ai/claude-code@$CLAUDE_CODE_VERSION"
        return 0
    fi
    # The npm package ships the native CLI as a per-platform optional
    # dependency; its postinstall (which npm may not run) only copies it.
    CLAUDE=$(ls "$WORK"/claude/node_modules/@anthropic-ai/claude-code-*/claude 2>/dev/null | head -1 || true)
    if [ -z "$CLAUDE" ]; then
        cannot_run "the Claude Code CLI: no native binary for this platform in the npm install"
        return 0
    fi
    start_simulated_proxy claude
    mkdir -p "$WORK/claude-home"
    claude_turn "$SIM_URL" claude -p "Check my SSH config for weaknesses"
    python3 - "$WORK/claude.json" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))
assert out.get("is_error") is False, out
assert out["result"].startswith("Simulated answer"), out["result"]
print("Claude Code received the rescued answer:", out["result"][:60], "...")
PY
    # First: a rewrite the real API rejects may still end in an answer (the
    # CLI asks again), so what the strict simulator logged decides.
    no_violations claude || exit 1
    grep -q 'rescued(cyber)' "$WORK/proxy-claude.err" || {
        echo "the first turn was not rescued:"; cat "$WORK/proxy-claude.err"; exit 1; }
    # The session's second turn (--continue replays it from its transcript
    # in the same HOME) is the same conversation: the simulator answers it,
    # and the guard has nothing to refuse or rescue again.
    claude_turn "$SIM_URL" claude-2 -p --continue "Now suggest a hardened sshd_config"
    # Each request's access line is written once its response has ended.
    for _ in $(seq 50); do
        [ "$(grep -c 'POST /v1/messages' "$WORK/proxy-claude.err")" -ge 2 ] && break
        sleep 0.1
    done
    [ "$(grep -c 'rescued(' "$WORK/proxy-claude.err")" = 1 ] || {
        echo "the second turn was rescued again:"; cat "$WORK/proxy-claude.err"; exit 1; }
    [ "$(grep -c 'POST /v1/messages 200 ok' "$WORK/proxy-claude.err")" = 1 ]
    [ "$(wc -l <"$WORK/refusals-claude.jsonl")" = 1 ]
    no_violations claude || exit 1
    # The simulator names a conversation its own way; the guard's key is
    # seen in a refusal's record. A fresh simulator meets the session anew
    # and refuses its third turn once: the guard's key for it is the one it
    # logged for the first.
    start_simulated_proxy claude-3
    claude_turn "$SIM_URL" claude-3 -p --continue "How do I check the hardened config?"
    for _ in $(seq 50); do [ -s "$WORK/refusals-claude-3.jsonl" ] && break; sleep 0.1; done
    python3 - "$WORK"/claude.json "$WORK"/claude-2.json "$WORK"/claude-3.json \
        "$WORK/refusals-claude.jsonl" "$WORK/refusals-claude-3.jsonl" <<'PY'
import json, sys
turns = [json.load(open(path)) for path in sys.argv[1:4]]
assert len({turn["session_id"] for turn in turns}) == 1, "--continue began another session"
first, third = ([json.loads(line) for line in open(path)] for path in sys.argv[4:6])
assert len(first) == 1 and len(third) == 1, (first, third)
assert first[0]["conversation"] == third[0]["conversation"], (first, third)
print("one session, one conversation key over its turns:", first[0]["conversation"])
PY
    no_violations claude-3 || exit 1
    cat "$WORK/proxy-claude.err"
}
if [ "${REFUSAL_GUARD_E2E_SKIP_CLAUDE:-0}" = 1 ]; then
    cannot_run "the Claude Code CLI: REFUSAL_GUARD_E2E_SKIP_CLAUDE=1"
elif ! command -v npm >/dev/null; then
    cannot_run "the Claude Code CLI: npm is not installed (.ci/test installs it with apt-get)"
else
    run_claude_code
fi

step "every strict simulator stops with status 0 (non-zero: it answered a broken request)"
for name in "${STRICT[@]}"; do
    stop_simulated_proxy "$name" || exit 1
    echo "$name: exit status 0"
done

step "Codex CLI headless through refusal-guard: a cyber_policy failure served by the fallback"
# The scripted upstream is the e2e harness's mock, which checks every
# request against the providers' documented rules; the harness runs while
# its stdin is open and exits non-zero if a request broke one.
run_codex() {
    if ! npm install --prefix "$WORK/codex" --no-audit --no-fund \
            "@openai/codex@$CODEX_VERSION" >"$WORK/npm-codex.log" 2>&1; then
        tail -20 "$WORK/npm-codex.log"
        cannot_run "the Codex CLI: npm could not install @openai/codex@$CODEX_VERSION"
        return 0
    fi
    # The launcher runs the native CLI, a per-platform optional dependency.
    local codex=$WORK/codex/node_modules/.bin/codex
    if ! "$codex" --version >"$WORK/codex-version.txt" 2>&1; then
        cat "$WORK/codex-version.txt"
        cannot_run "the Codex CLI: no native binary for this platform in the npm install"
        return 0
    fi
    cat "$WORK/codex-version.txt"
    mkfifo "$WORK/harness.in"
    "$BIN/e2e-harness" --log "$WORK/harness.jsonl" <"$WORK/harness.in" \
        >"$WORK/harness.out" 2>"$WORK/harness.err" &
    local harness=$!
    PIDS+=("$harness")
    exec 9>"$WORK/harness.in"
    for _ in $(seq 100); do [ -s "$WORK/harness.out" ] && break; sleep 0.1; done
    [ -s "$WORK/harness.out" ] || { echo "the e2e harness did not start:"; cat "$WORK/harness.err"; exit 1; }
    local mock
    mock=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["mock"])' \
        "$WORK/harness.out")
    # Started with fd 9 closed, as Codex is: the harness sees its stdin end
    # only once no process holds the fifo open.
    "$BIN/refusal-guard" --listen 127.0.0.1:0 --upstream "$mock" --chain gpt-5.5=gpt-5.4-mini \
        --log "$WORK/refusals-codex.jsonl" 2>"$WORK/proxy-codex.err" 9>&- &
    PIDS+=("$!")
    wait_listening "$WORK/proxy-codex.err"
    # Codex's home, config and working directory stay in $WORK; the mock
    # plays the script named in the provider's headers: the cyber_policy
    # failure, then the fallback's answer.
    mkdir -p "$WORK/codex-home" "$WORK/codex-work"
    cat >"$WORK/codex-home/config.toml" <<TOML
model = "gpt-5.5"
model_provider = "refusal-guard"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.refusal-guard]
name = "refusal-guard"
base_url = "$LISTEN_URL/v1"
wire_api = "responses"
env_key = "REFUSAL_GUARD_E2E_OPENAI_KEY"
http_headers = { "x-mock-script" = "openai/hand-written/responses_failed_cyber_policy.sse,e2e/responses_text.sse", "x-mock-id" = "codex" }
TOML
    # Nothing beyond loopback: whatever Codex would send elsewhere goes to
    # a proxy on a port nothing listens on.
    HOME="$WORK/codex-home" CODEX_HOME="$WORK/codex-home" REFUSAL_GUARD_E2E_OPENAI_KEY=sk-dummy \
        HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 ALL_PROXY=http://127.0.0.1:9 \
        NO_PROXY=127.0.0.1,localhost \
        timeout 120 "$codex" exec --skip-git-repo-check --ephemeral --json -C "$WORK/codex-work" \
        -o "$WORK/codex-last.txt" "Check my SSH config for weaknesses" \
        </dev/null >"$WORK/codex.jsonl" 2>"$WORK/codex.err" 9>&- || {
            echo "Codex failed:"; cat "$WORK/codex.err" "$WORK/codex.jsonl" "$WORK/proxy-codex.err"; exit 1; }
    # The record is written once the served stream has ended.
    for _ in $(seq 50); do [ -s "$WORK/refusals-codex.jsonl" ] && break; sleep 0.1; done
    curl -s --max-time 10 "$mock/__mock/seen?id=codex" >"$WORK/codex-seen.json"
    python3 - "$WORK/codex-last.txt" "$WORK/codex.jsonl" "$WORK/refusals-codex.jsonl" \
        "$WORK/codex-seen.json" <<'PY'
import json, sys
last, events, log, seen = sys.argv[1:5]
answer = open(last).read().strip()
assert answer == "Fallback answer: disable password logins and root login in sshd_config.", answer
kinds = [json.loads(line)["type"] for line in open(events) if line.strip()]
assert "turn.completed" in kinds and "turn.failed" not in kinds and "error" not in kinds, kinds
records = [json.loads(line) for line in open(log)]
assert len(records) == 1, records
record = records[0]
assert record["outcome"] == "fallback", record
assert record["signal"] == "policy_error" and record["category"] == "cyber", record
assert record["wire_api"] == "openai_responses", record
assert [a["model"] for a in record["attempts"]][1:] == ["gpt-5.4-mini"], record["attempts"]
requests = [json.loads(r["body"]) for r in json.load(open(seen))]
assert [r["model"] for r in requests] == ["gpt-5.5", "gpt-5.4-mini"], [r["model"] for r in requests]
fallback = dict(requests[1], model="gpt-5.5")
assert fallback == requests[0], "the fallback is Codex's request on the fallback model"
print("Codex received the fallback's answer:", answer)
PY
    grep -q 'POST /v1/responses 200 fallback(cyber)' "$WORK/proxy-codex.err"
    "$BIN/refusal-guard" report --log "$WORK/refusals-codex.jsonl" --json >"$WORK/report-codex.json"
    python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["by_category"] == {"cyber": 1} and r["by_outcome"] == {"fallback": 1}, r' \
        "$WORK/report-codex.json"
    # The harness exits once its stdin closes: non-zero if a request broke
    # the contract.
    exec 9>&-
    timeout 20 tail --pid="$harness" -f /dev/null || { echo "the harness did not stop"; exit 1; }
    wait "$harness" || { echo "the mock saw a request the API rejects:"; cat "$WORK/harness.err"; exit 1; }
    cat "$WORK/proxy-codex.err"
}
if [ "${REFUSAL_GUARD_E2E_SKIP_CODEX:-0}" = 1 ]; then
    cannot_run "the Codex CLI: REFUSAL_GUARD_E2E_SKIP_CODEX=1"
elif ! command -v npm >/dev/null; then
    cannot_run "the Codex CLI: npm is not installed (.ci/test installs it with apt-get)"
else
    run_codex
fi

step "chromium for the dashboard test (tests/e2e/test_ops.py)"
# Debian's chromium, driven by Playwright; never a downloaded browser.
if [ ! -x /usr/bin/chromium ]; then
    export REFUSAL_GUARD_E2E_NO_CHROMIUM="/usr/bin/chromium is missing (.ci/test installs it: apt-get install -y chromium)"
    cannot_run "the dashboard in a browser: $REFUSAL_GUARD_E2E_NO_CHROMIUM"
else
    echo "/usr/bin/chromium: $(/usr/bin/chromium --version 2>/dev/null || echo 'present')"
fi

step "Python SDK tests (anthropic, openai) through the proxy"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check -r tests/e2e/requirements.txt

step "Claude Code CLI headless in Bedrock gateway mode (the proxy signs; botocore checks)"
if [ -z "$CLAUDE" ]; then
    cannot_run "Claude Code in Bedrock gateway mode: no Claude Code CLI (see the Claude Code step above)"
else
    # A mock Bedrock runtime that refuses Opus and checks every signature
    # (tests/e2e/test_bedrock.py run as a script), the proxy in gateway mode
    # with the operator's keys, and Claude Code without AWS credentials.
    .venv/bin/python tests/e2e/test_bedrock.py >"$WORK/bedrock.port" 2>"$WORK/bedrock.err" &
    PIDS+=("$!")
    for _ in $(seq 100); do [ -s "$WORK/bedrock.port" ] && break; sleep 0.1; done
    BEDROCK_PORT=$(head -1 "$WORK/bedrock.port")
    OPUS=us.anthropic.claude-opus-4-7-v1:0
    SONNET=us.anthropic.claude-sonnet-4-5-v1:0
    env -u AWS_PROFILE -u AWS_SESSION_TOKEN -u AWS_BEARER_TOKEN_BEDROCK \
        AWS_ACCESS_KEY_ID=AKIDPROXYEXAMPLE AWS_SECRET_ACCESS_KEY=proxy/secret/EXAMPLEKEY \
        "$BIN/refusal-guard" --bedrock-region us-east-1 --upstream "http://127.0.0.1:$BEDROCK_PORT" \
        --listen 127.0.0.1:0 --log "$WORK/refusals-bedrock.jsonl" --chain "$OPUS=$SONNET" \
        2>"$WORK/proxy-bedrock.err" &
    PIDS+=("$!")
    BEDROCK_URL=""
    for _ in $(seq 100); do
        BEDROCK_URL=$(grep -o 'listening on http://[0-9.:]*' "$WORK/proxy-bedrock.err" | head -1 | sed 's/listening on //') || true
        [ -n "$BEDROCK_URL" ] && break
        sleep 0.1
    done
    [ -n "$BEDROCK_URL" ] || { echo "the gateway proxy did not start:"; cat "$WORK/proxy-bedrock.err"; exit 1; }
    mkdir -p "$WORK/claude-bedrock-home"
    env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_PROFILE -u ANTHROPIC_API_KEY \
        HOME="$WORK/claude-bedrock-home" CLAUDE_CODE_USE_BEDROCK=1 \
        ANTHROPIC_BEDROCK_BASE_URL="$BEDROCK_URL" CLAUDE_CODE_SKIP_BEDROCK_AUTH=1 AWS_REGION=us-east-1 \
        ANTHROPIC_MODEL="$OPUS" ANTHROPIC_SMALL_FAST_MODEL="$SONNET" \
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 \
        timeout 120 "$CLAUDE" -p "Check my SSH config for weaknesses" --output-format json \
        </dev/null >"$WORK/claude-bedrock.json" 2>"$WORK/claude-bedrock.err" || {
            echo "Claude Code (Bedrock) failed:"; cat "$WORK/claude-bedrock.err" "$WORK/claude-bedrock.json" "$WORK/bedrock.err"; exit 1; }
    python3 - "$WORK/claude-bedrock.json" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))
assert out.get("is_error") is False, out
assert out["result"].startswith("Bedrock answer via the fallback"), out["result"]
print("Claude Code (Bedrock) received the fallback's answer:", out["result"])
PY
    # What the mock refused (a bad signature, a request Bedrock rejects), as
    # it lists it: none, and the list must be there.
    curl -s --max-time 10 "http://127.0.0.1:$BEDROCK_PORT/__mock/violations" >"$WORK/bedrock-violations.json"
    python3 - "$WORK/bedrock-violations.json" "$WORK/bedrock.err" <<'PY' || exit 1
import json, sys
failures = json.load(open(sys.argv[1]))
if failures:
    print("the mock Bedrock refused requests:\n  " + "\n  ".join(failures))
    print(open(sys.argv[2]).read())
    sys.exit(1)
print("the mock Bedrock refused nothing: every request signed and keeping Bedrock's rules")
PY
    grep -q '"outcome":"fallback"' "$WORK/refusals-bedrock.jsonl"
    cat "$WORK/bedrock.err"
fi

status=0
REFUSAL_GUARD_E2E_HARNESS="$BIN/e2e-harness" REFUSAL_GUARD_BIN="$BIN/refusal-guard" \
    REFUSAL_GUARD_E2E_CLAUDE="$CLAUDE" \
    .venv/bin/python -m pytest tests/e2e -q -p no:cacheprovider || status=$?
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: failing"
    exit 1
fi
if [ "$status" -eq 0 ] && [ "${#SKIPPED[@]}" -gt 0 ]; then
    printf '\nPassed, but these checks did not run:\n'
    printf '  - %s\n' "${SKIPPED[@]}"
fi
exit "$status"
