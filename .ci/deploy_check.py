#!/usr/bin/env python3
"""Validates deploy/ against published schemas and against the binary.

- Kubernetes manifests: every object against the Kubernetes API's own
  schemas (kubernetes-validate, strict: unknown fields fail); the
  ServiceMonitor and the PrometheusRule against prometheus-operator's CRD
  schemas (vendored in .ci/schemas/, with their licence; strict too); the
  PrometheusRule's groups are alerts.yaml's, where promtool tests them;
  kustomization.yaml lists every manifest.
- compose.yaml against the Compose Specification's JSON schema (vendored).
- Both against the proxy: every variable they set is one `refusal-guard
  --help` names; the ports they probe and publish are the ones the proxy
  listens on; the grace periods cover --drain-timeout.
- The Grafana dashboard: its JSON, its panels, and each expression as
  PromQL (written out as recording rules for `promtool check rules`).

Usage: deploy_check.py BIN [--without-promtool]  (BIN: the refusal-guard
binary). Prints what it checked; exits non-zero with every failure listed.
With --without-promtool (promtool is missing) every check runs but the
dashboard's expressions as PromQL, which it names as SKIPPED.
"""
import json
import pathlib
import re
import subprocess
import sys
import tempfile

import jsonschema
import kubernetes_validate
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
SCHEMAS = ROOT / ".ci" / "schemas"
KUBERNETES_VERSION = "1.37.0"
FAILURES = []


def fail(message):
    FAILURES.append(message)
    print("FAIL:", message)


def ok(message):
    print("ok:", message)


def documents(path):
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


# The vendored CRD of each prometheus-operator kind the manifests use.
CRDS = {
    "ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
    "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
}


def closed(schema):
    """`schema` with unknown fields refused wherever it lists the known ones,
    its patterns in Python's dialect.

    The API server prunes a custom resource's unknown fields without a word
    (or rejects them, under strict field validation), so a misspelt key such
    as `annotation:` would vanish from the rule; JSON Schema lets it through
    unless told otherwise. Objects without `properties` (metadata, free
    maps) and those that keep unknown fields stay open. Go's regexps take a
    flag group after `^` (`^(?i)(abort|warn)?$`), Python's only first: the
    same expression with the flag moved to the front."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: closed(value) for key, value in schema.items()}
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and pattern.startswith("^(?i)"):
        out["pattern"] = "(?i)^" + pattern[len("^(?i)"):]
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_schema(kind):
    crd = yaml.safe_load((SCHEMAS / "prometheus-operator" / CRDS[kind]).read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return closed(version["schema"]["openAPIV3Schema"])


def check_kubernetes():
    folder = DEPLOY / "kubernetes"
    objects = []
    manifests = sorted(p for p in folder.glob("*.yaml") if p.name != "kustomization.yaml")
    for path in manifests:
        for doc in documents(path):
            where = f"{path.relative_to(ROOT)} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            objects.append((path, doc))
            if doc.get("apiVersion", "").startswith("monitoring.coreos.com/"):
                if doc.get("kind") not in CRDS:
                    fail(f"{where}: no vendored CRD schema for {doc.get('kind')}")
                    continue
                try:
                    jsonschema.validate(doc, crd_schema(doc["kind"]))
                    ok(f"{where}: valid against prometheus-operator's CRD schema (strict)")
                except jsonschema.ValidationError as error:
                    fail(f"{where}: {error.message} at {list(error.absolute_path)}")
                continue
            try:
                kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
                ok(f"{where}: valid for Kubernetes {KUBERNETES_VERSION} (strict)")
            except kubernetes_validate.ValidationError as error:
                fail(f"{where}: {error.message} at {list(error.path)}")
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    listed = set(kustomization.get("resources", []))
    present = {p.name for p in manifests}
    if listed != present:
        fail(f"kustomization.yaml lists {sorted(listed)}, the folder holds {sorted(present)}")
    else:
        ok("kustomization.yaml lists every manifest")
    return objects


def check_prometheus_rule(objects):
    """The PrometheusRule carries alerts.yaml's groups exactly: promtool
    checks and tests alerts.yaml, so a copy that drifted would ship rules
    nothing tested."""
    rules = [d for _, d in objects if d["kind"] == "PrometheusRule"]
    if len(rules) != 1:
        fail(f"deploy/kubernetes/ holds {len(rules)} PrometheusRule objects, not one")
        return
    groups = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yaml").read_text())["groups"]
    shipped = rules[0].get("spec", {}).get("groups")
    if shipped != groups:
        def rules_of(some):
            return {
                (g.get("name"), r.get("alert") or r.get("record")): r
                for g in some or []
                for r in g.get("rules", [])
            }
        ours, theirs = rules_of(groups), rules_of(shipped)
        differ = sorted(
            f"{group}/{rule}" for group, rule in set(ours) | set(theirs)
            if ours.get((group, rule)) != theirs.get((group, rule))
        )
        fail(
            "the PrometheusRule's spec.groups are not alerts.yaml's groups "
            f"(rules that differ: {differ or 'their order or the groups own fields'}): "
            "copy alerts.yaml's groups under spec:"
        )
    else:
        alerts = sum(len(g["rules"]) for g in groups)
        ok(f"the PrometheusRule carries alerts.yaml's {len(groups)} group(s), {alerts} rules")


def help_text(binary):
    return subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout


def known_variables(binary):
    return set(re.findall(r"env: ([A-Z][A-Z0-9_]+)", help_text(binary)))


def seconds(value):
    match = re.fullmatch(r"(\d+)(s?)", str(value))
    return int(match.group(1)) if match else None


def check_deployment(objects, variables):
    (deployment,) = [d for _, d in objects if d["kind"] == "Deployment" and d["metadata"]["name"] == "refusal-guard"]
    (service,) = [d for _, d in objects if d["kind"] == "Service" and d["metadata"]["name"] == "refusal-guard"]
    monitors = [d for _, d in objects if d["kind"] == "ServiceMonitor"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    unknown = sorted(set(env) - variables)
    if unknown:
        fail(f"deployment.yaml sets variables refusal-guard does not read: {unknown}")
    else:
        ok(f"deployment.yaml sets only variables refusal-guard reads ({len(env)})")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    listen = int(env["REFUSAL_GUARD_LISTEN"].rsplit(":", 1)[1])
    admin = int(env["REFUSAL_GUARD_ADMIN"].rsplit(":", 1)[1])
    if (ports.get("api"), ports.get("admin")) != (listen, admin):
        fail(f"container ports {ports} are not the listen ({listen}) and admin ({admin}) ports")
    else:
        ok("the container's ports are the proxy's listen and admin ports")
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        got = container[probe]["httpGet"]
        if (got["path"], got["port"]) != (path, "admin"):
            fail(f"{probe} is {got}, not {path} on the admin port")
    ok("readiness on /readyz, liveness on /healthz, on the admin port")
    drain = seconds(env.get("REFUSAL_GUARD_DRAIN_TIMEOUT", 30))
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    grace = pod["terminationGracePeriodSeconds"]
    if grace < pre_stop + drain:
        fail(f"terminationGracePeriodSeconds {grace} < preStop {pre_stop} + drain {drain}")
    else:
        ok(f"grace {grace} s covers the preStop sleep ({pre_stop} s) and the drain ({drain} s)")
    secrets = {
        e["valueFrom"]["secretKeyRef"]["key"]
        for e in container["env"]
        if "valueFrom" in e
    }
    (secret,) = [d for _, d in objects if d["kind"] == "Secret"]
    if "REFUSAL_GUARD_CLIENT_KEY" not in secret.get("stringData", {}) or "REFUSAL_GUARD_CLIENT_KEY" not in secrets:
        fail("the client key is not read from the Secret")
    else:
        ok("the keys come from the Secret")
    service_ports = {p["name"]: p["targetPort"] for p in service["spec"]["ports"]}
    if service_ports != {"api": "api", "admin": "admin"}:
        fail(f"the Service's ports {service_ports} do not target api and admin")
    selector = service["spec"]["selector"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in selector.items()):
        fail("the Service's selector does not select the Deployment's pods")
    for monitor in monitors:
        (endpoint,) = monitor["spec"]["endpoints"]
        if (endpoint["port"], endpoint["path"]) != ("admin", "/metrics"):
            fail(f"the ServiceMonitor scrapes {endpoint}, not /metrics on admin")
        if any(service["metadata"]["labels"].get(k) != v for k, v in monitor["spec"]["selector"]["matchLabels"].items()):
            fail("the ServiceMonitor's selector does not select the Service")
        # The Redis alert reads replicas that turned unready for the outage.
        relabelings = json.dumps(endpoint.get("relabelings", []))
        if "_ready" in relabelings:
            fail("the ServiceMonitor's relabelings read endpoint readiness: unready replicas must stay scraped")
    if service["spec"].get("publishNotReadyAddresses"):
        fail("the Service publishes not-ready addresses: unready replicas would get API traffic")
    ok("the Service and the ServiceMonitor select the proxy and scrape /metrics on admin, unready replicas too")
    return env


def check_compose(variables):
    path = DEPLOY / "compose.yaml"
    compose = yaml.safe_load(path.read_text())
    schema = json.loads((SCHEMAS / "compose-spec" / "compose-spec.json").read_text())
    try:
        jsonschema.validate(compose, schema)
        ok("compose.yaml: valid against the Compose Specification's schema")
    except jsonschema.ValidationError as error:
        fail(f"compose.yaml: {error.message} at {list(error.absolute_path)}")
    services = compose["services"]
    proxy = services["refusal-guard"]
    if proxy.get("deploy", {}).get("replicas") != 3:
        fail("compose.yaml: the proxy does not run three replicas")
    env = proxy["environment"]
    unknown = sorted(set(env) - variables)
    if unknown:
        fail(f"compose.yaml sets variables refusal-guard does not read: {unknown}")
    if not env["REFUSAL_GUARD_STATE"].startswith("redis://redis:"):
        fail("compose.yaml: the replicas do not share the redis service")
    listen = env["REFUSAL_GUARD_LISTEN"].rsplit(":", 1)[1]
    nginx = (DEPLOY / "compose" / "nginx.conf").read_text()
    if f"server refusal-guard:{listen}" not in nginx:
        fail(f"nginx.conf does not balance over refusal-guard:{listen}")
    lb = services["lb"]
    if not lb.get("ports") or "./compose/nginx.conf:/etc/nginx/nginx.conf:ro" not in lb.get("volumes", []):
        fail("compose.yaml: the load balancer publishes nothing or lacks its config")
    drain = seconds(env.get("REFUSAL_GUARD_DRAIN_TIMEOUT", 30))
    if seconds(proxy.get("stop_grace_period", "10s")) <= drain:
        fail("compose.yaml: stop_grace_period does not cover --drain-timeout")
    ok("compose.yaml: three replicas on one Redis behind nginx, variables the proxy reads, grace over the drain")


# The series with a `tenant` label (src/telemetry/metrics.rs).
TENANT_LABELLED = (
    "refusal_guard_refusals_total",
    "refusal_guard_recovery_attempts_total",
    "refusal_guard_requests_total",
    "refusal_guard_recovery_capped_total",
    "refusal_guard_refused_tokens_total",
    "refusal_guard_fallback_credit_total",
    "refusal_guard_reroutes_total",
    "refusal_guard_recovery_latency_seconds",
)


def check_dashboard(promtool: bool):
    path = DEPLOY / "grafana" / "refusal-guard.json"
    dashboard = json.loads(path.read_text())
    for key in ("title", "uid", "schemaVersion", "panels", "templating"):
        if key not in dashboard:
            fail(f"the dashboard lacks {key}")
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    for needed in ("datasource", "instance", "tenant"):
        if needed not in variables:
            fail(f"the dashboard has no ${needed} variable")
    ids = [p["id"] for p in dashboard["panels"]]
    if len(ids) != len(set(ids)):
        fail("the dashboard's panel ids repeat")
    exprs = []
    for panel in dashboard["panels"]:
        for key in ("type", "title", "gridPos", "datasource", "targets"):
            if key not in panel:
                fail(f"panel {panel.get('title')} lacks {key}")
        for target in panel.get("targets", []):
            expr = target.get("expr", "")
            if not expr:
                fail(f"panel {panel['title']}: a target without expr")
            for name in re.findall(r"\$(\w+)", expr):
                if name not in variables and name != "__rate_interval":
                    fail(f"panel {panel['title']}: ${name} is no dashboard variable")
            # The pickers must narrow every panel they can.
            if "$instance" not in expr:
                fail(f"panel {panel['title']}: an expression not narrowed by $instance")
            if any(name in expr for name in TENANT_LABELLED) and "$tenant" not in expr:
                fail(f"panel {panel['title']}: an expression over a tenant's series not narrowed by $tenant")
            # Each variable as its "All" value: every one stands in a regex matcher.
            expr = expr.replace("$__rate_interval", "5m")
            exprs.append(re.sub(r"\$(\w+)", lambda m: ".*" if m.group(1) in variables else m.group(0), expr))
    if not promtool:
        print(f"SKIPPED: the dashboard's {len(exprs)} expressions as PromQL: promtool is missing")
        ok(f"the dashboard: {len(dashboard['panels'])} panels, {len(exprs)} expressions (not parsed)")
        return
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:panel_{i}", "expr": expr} for i, expr in enumerate(exprs)
    ]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as out:
        yaml.safe_dump(rules, out)
    checked = subprocess.run(["promtool", "check", "rules", out.name], capture_output=True, text=True)
    pathlib.Path(out.name).unlink()
    if checked.returncode != 0:
        fail(f"the dashboard's expressions are not all PromQL:\n{checked.stdout}{checked.stderr}")
    else:
        ok(f"the dashboard: {len(dashboard['panels'])} panels, {len(exprs)} expressions, all PromQL")


def main():
    args = sys.argv[1:]
    promtool = "--without-promtool" not in args
    args = [a for a in args if a != "--without-promtool"]
    if len(args) != 1:
        sys.exit(__doc__)
    variables = known_variables(args[0])
    if "REFUSAL_GUARD_BEDROCK_REGION" not in variables:
        fail("refusal-guard --help names no REFUSAL_GUARD_BEDROCK_REGION: is this the binary with every feature?")
    objects = check_kubernetes()
    check_prometheus_rule(objects)
    check_deployment(objects, variables)
    check_compose(variables)
    check_dashboard(promtool)
    if FAILURES:
        print(f"\n{len(FAILURES)} deploy check(s) failed")
        sys.exit(1)
    print("\nevery deploy check passed")


if __name__ == "__main__":
    main()
