#!/usr/bin/env bash
# The checks of deploy/ (run by .ci/test after the Rust tests):
#   1. the alert rules: `promtool check rules`, then `promtool test rules`
#      (each alert fires on a scripted series and stays quiet on a normal
#      one: deploy/prometheus/alerts.test.yaml);
#   2. the manifests and the dashboard (.ci/deploy_check.py): Kubernetes
#      objects against the API's schemas, the ServiceMonitor and the
#      PrometheusRule against prometheus-operator's CRDs (the rule's groups
#      against alerts.yaml's), compose.yaml against the Compose
#      Specification, all against the binary's flags and ports; the
#      dashboard's expressions as PromQL (tests/deploy checks their metric
#      names against a real scrape);
#   3. the image (.ci/image.sh): the Dockerfile built with podman, and
#      `refusal-guard --simulate --strict` in it answering a request.
# Under CI=true a check that cannot run fails the run; elsewhere it is
# skipped and named.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${REFUSAL_GUARD_BIN:-${CARGO_TARGET_DIR:-target}/debug/refusal-guard}

cannot_run() {
    if [ "${CI:-}" = true ]; then
        echo "FAILED (CI=true, so every check must run): $*"
        exit 1
    fi
    echo "SKIPPED: $*"
}

step() { printf '\n== %s\n' "$*"; }
timed() {
    local started=$SECONDS
    "$@"
    echo "($((SECONDS - started)) s)"
}

step "alert rules: promtool check rules, promtool test rules"
if command -v promtool >/dev/null 2>&1; then
    timed promtool check rules deploy/prometheus/alerts.yaml
    (cd deploy/prometheus && timed promtool test rules alerts.test.yaml)
else
    cannot_run "the alert rules: promtool is missing (.ci/test installs Debian's prometheus)"
fi

step "manifests and dashboard: .ci/deploy_check.py $BIN"
[ -x "$BIN" ] || cargo build -p refusal-guard-proxy --all-features --bin refusal-guard
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check -r .ci/deploy-requirements.txt
if command -v promtool >/dev/null 2>&1; then
    timed .venv/bin/python .ci/deploy_check.py "$BIN"
else
    cannot_run "the dashboard's expressions: promtool is missing"
fi

step "the image: podman build, refusal-guard --simulate --strict in it"
timed bash .ci/image.sh
