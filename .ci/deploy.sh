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
# Under CI (any value of CI but empty, 0 or false) a check that cannot run
# fails the run; elsewhere it is skipped, named, and listed again at the
# end (the image's skips with them). Without promtool only what needs it is
# skipped: the alert rules' checks and the dashboard's expressions as PromQL.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${REFUSAL_GUARD_BIN:-${CARGO_TARGET_DIR:-target}/debug/refusal-guard}
WORK=$(mktemp -d)

# Whether this is CI: CI set to anything but empty, 0 or false.
in_ci() {
    case "${CI:-}" in
        "" | 0 | false) return 1 ;;
        *) return 0 ;;
    esac
}

SKIPPED=()
cannot_run() {
    if in_ci; then
        echo "FAILED (CI=${CI}, so every check must run): $*"
        exit 1
    fi
    echo "SKIPPED: $*"
    SKIPPED+=("$*")
}

# On the way out, whatever the status: the checks that did not run.
finish() {
    local status=$?
    rm -rf "$WORK"
    if [ "${#SKIPPED[@]}" -gt 0 ]; then
        if [ "$status" -eq 0 ]; then
            printf '\nPassed, but these checks did not run:\n'
        else
            printf '\nThese checks did not run:\n'
        fi
        printf '  - %s\n' "${SKIPPED[@]}"
    fi
}
trap finish EXIT

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
    cannot_run "the alert rules (promtool check rules, promtool test rules): promtool is missing (.ci/test installs Debian's prometheus)"
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
    # Everything but the expressions' parse: Kubernetes, the operator's
    # CRDs, Compose, the flags, ports and the dashboard's structure.
    cannot_run "the dashboard's expressions as PromQL (promtool check rules): promtool is missing"
    timed .venv/bin/python .ci/deploy_check.py "$BIN" --without-promtool
fi

step "the image: podman build, refusal-guard --simulate --strict in it"
timed bash .ci/image.sh | tee "$WORK/image.out"
while IFS= read -r skipped; do
    SKIPPED+=("$skipped")
done < <(sed -n 's/^SKIPPED: //p' "$WORK/image.out")
