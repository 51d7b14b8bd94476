#!/usr/bin/env bash
# Builds the repository's Dockerfile as a user would, with podman, and runs
# `refusal-guard --simulate --strict` in the image, answering a request.
#
# No container registry is reachable here, so the Dockerfile's two base
# images are replaced (through its build arguments) by one made locally
# from Debian's packages with debootstrap: glibc, gcc and CA certificates,
# with the machine's own Rust toolchain and crate cache mounted where the
# official Rust image keeps them (the build runs with no network, from the
# lock file's crates the tests already fetched). The build's target
# directory is a cache outside the clone (REFUSAL_GUARD_IMAGE_CACHE), so a
# later run rebuilds only what changed; the first takes an optimised build's
# time. podman runs with runc and explicit rlimits: crun refuses this
# machine's hybrid cgroups, and raising RLIMIT_NOFILE is not permitted.
#
# Exits non-zero on any failure; prints SKIPPED (or, under CI: any value of
# CI but empty, 0 or false, fails) when podman cannot be had, and names the
# checks that did not run again at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${REFUSAL_GUARD_IMAGE_CACHE:-/var/cache/refusal-guard-image}
BASE=localhost/refusal-guard-ci/debian:bookworm
IMAGE=localhost/refusal-guard:ci
RUSTUP=${RUSTUP_HOME:-$HOME/.rustup}
CARGO=${CARGO_HOME:-$HOME/.cargo}
WORK=$(mktemp -d)
PID=""
# Every check of the image, in order: what did not run is listed at the end.
CHECKS=("the image's build (podman build)" "the image's user and flags" \
    "refusal-guard --simulate --strict in the image")
DONE=0
SKIPPED=()
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null || true
    rm -rf "$WORK"
    if [ "${#SKIPPED[@]}" -gt 0 ]; then
        printf '\nThese checks did not run:\n'
        printf '  - %s\n' "${SKIPPED[@]}"
    fi
}
trap cleanup EXIT

# Whether this is CI: CI set to anything but empty, 0 or false.
in_ci() {
    case "${CI:-}" in
        "" | 0 | false) return 1 ;;
        *) return 0 ;;
    esac
}

# Nothing after this can run: fails under CI, else names each check left
# (a line `SKIPPED: ...` each, which .ci/deploy.sh lists too) and stops.
cannot_run() {
    if in_ci; then
        echo "FAILED (CI=${CI}, so every check must run): $*"
        exit 1
    fi
    local check
    for check in "${CHECKS[@]:$DONE}"; do
        echo "SKIPPED: $check: $*"
        SKIPPED+=("$check: $*")
    done
    exit 0
}

for tool in podman runc debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || cannot_run "$tool is missing (.ci/test installs podman, runc and debootstrap with apt-get)"
done
[ -d "$RUSTUP/toolchains" ] || cannot_run "no Rust toolchain under $RUSTUP to mount into the build"

# The limits podman may set: no more open files than this process may have
# (raising it is not permitted), and a process limit below the hard one
# (setting it at the hard limit is refused too; 4096 is plenty for cargo).
NOFILE=$(ulimit -Hn)
[ "$NOFILE" = unlimited ] && NOFILE=65536
NPROC=$(ulimit -Hu)
if [ "$NPROC" = unlimited ] || [ "$NPROC" -gt 4096 ]; then NPROC=4096; fi
RUN=(--runtime runc --ulimit "nofile=$NOFILE:$NOFILE" --ulimit "nproc=$NPROC:$NPROC")

if ! podman image exists "$BASE"; then
    echo "== the local base image (debootstrap bookworm: gcc, libc6-dev, ca-certificates)"
    debootstrap --variant=minbase --include=ca-certificates,gcc,libc6-dev \
        bookworm "$WORK/rootfs" http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1 || {
        tail -20 "$WORK/debootstrap.log"; echo "debootstrap failed"; exit 1; }
    tar -C "$WORK/rootfs" -c . | podman import \
        --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV CARGO_HOME=/usr/local/cargo' \
        --change 'ENV RUSTUP_HOME=/usr/local/rustup' \
        --change 'ENV CARGO_NET_OFFLINE=true' \
        - "$BASE" >/dev/null
    rm -rf "$WORK/rootfs"
fi

echo "== podman build (Dockerfile; base images: $BASE)"
mkdir -p "$CACHE/target"
# The cache keeps the dependencies built; the crate itself is always built
# anew from what was copied in (cargo judges a path crate fresh by mtimes,
# and a file edited while an earlier build ran may be older than its output).
rm -rf "$CACHE"/target/*/.fingerprint/refusal-guard-*
started=$SECONDS
podman build "${RUN[@]}" --network none --layers=false \
    --build-arg "RUST_IMAGE=$BASE" --build-arg "RUNTIME_IMAGE=$BASE" \
    --build-arg PROFILE=image-check \
    -v "$RUSTUP:/usr/local/rustup:ro" \
    -v "$CARGO/bin:/usr/local/cargo/bin:ro" \
    -v "$CARGO/registry:/usr/local/cargo/registry" \
    -v "$CACHE/target:/src/target" \
    -t "$IMAGE" -f Dockerfile . >"$WORK/build.log" 2>&1 || {
    tail -40 "$WORK/build.log"; echo "podman build failed"; exit 1; }
echo "built in $((SECONDS - started)) s"
DONE=1
# The image of the previous run, now untagged, goes.
podman image prune -f >/dev/null 2>&1 || true

echo "== the image: non-root, the binary with every feature"
user=$(podman image inspect --format '{{.Config.User}}' "$IMAGE")
[ "$user" = "65532:65532" ] || { echo "the image runs as '$user', not 65532:65532"; exit 1; }
podman run --rm "${RUN[@]}" --network none "$IMAGE" --help >"$WORK/help.txt"
grep -q -- '--otlp' "$WORK/help.txt"
grep -q -- '--bedrock-region' "$WORK/help.txt"
DONE=2

echo "== refusal-guard --simulate --strict in the image answers a request"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
ADMIN=$(free_port)
podman run --rm "${RUN[@]}" --network host --name refusal-guard-ci-$$ \
    -e REFUSAL_GUARD_LISTEN="127.0.0.1:$PORT" -e REFUSAL_GUARD_ADMIN="127.0.0.1:$ADMIN" \
    "$IMAGE" --simulate --strict >"$WORK/run.out" 2>"$WORK/run.err" &
PID=$!
for _ in $(seq 100); do
    grep -q 'listening on' "$WORK/run.err" 2>/dev/null && break
    sleep 0.2
done
status=$(curl -s -o "$WORK/answer.json" -w '%{http_code}' --max-time 20 "http://127.0.0.1:$PORT/v1/messages" \
    -H 'content-type: application/json' \
    -d '{"model":"claude-opus-4-7","max_tokens":64,"messages":[{"role":"user","content":"Check my SSH config"}]}') || true
health=$(curl -s --max-time 5 "http://127.0.0.1:$ADMIN/healthz") || true
# The strict simulator's count of requests that broke a rule, from its
# admin listener (no log line: RUST_LOG cannot hide it).
violations=$(curl -s --max-time 5 "http://127.0.0.1:$ADMIN/metrics" \
    | awk '$1 == "refusal_guard_contract_violations_total" { print $2 }') || true
podman stop -t 5 "refusal-guard-ci-$$" >/dev/null 2>&1 || true
exited=0
wait "$PID" 2>/dev/null || exited=$?
PID=""
echo "status $status: $(head -c 300 "$WORK/answer.json")"
[ "$status" = 200 ] || { cat "$WORK/run.err"; exit 1; }
python3 - "$WORK/answer.json" <<'PY'
import json, sys
answer = json.load(open(sys.argv[1]))
text = "".join(block.get("text", "") for block in answer["content"])
assert text.startswith("Simulated answer"), answer
print("the image's proxy rescued the simulated refusal:", text[:60], "...")
PY
grep -q 'rescued(cyber)' "$WORK/run.err" || { cat "$WORK/run.err"; exit 1; }
[ "$health" = ok ] || { echo "/healthz answered '$health'"; exit 1; }
echo "/healthz: ok"
[ "$violations" = 0 ] || { echo "contract violations counted: '${violations}'"; cat "$WORK/run.err"; exit 1; }
# Stopped by SIGTERM: 0, or 3 had the strict simulator answered a broken request.
[ "$exited" = 0 ] || { echo "the image's proxy exited with status $exited"; cat "$WORK/run.err"; exit 1; }
echo "no contract violation, exit status 0"
