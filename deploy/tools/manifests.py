"""Render every kustomize overlay and validate what it produces, offline.

Standard kinds are checked by kubernetes-validate (strict, no unknown fields);
the CRDs (WasmPlugin, EnvoyFilter, PodMonitor, PrometheusRule) by the JSON
schemas in deploy/schemas/. Then the deployment's own invariants (lint): the
things that would deploy cleanly yet break meshlimit, such as a subPath rules
mount or a WasmPlugin naming the wrong agent cluster, or leave a way around a
limit, such as an agent without its secret or an Envoy that takes the client
address from X-Forwarded-For.

    manifests.py --out target/deploy deploy/overlays/istio deploy/overlays/envoy \
                 [--bootstrap envoy.yaml ...]

Each --bootstrap is an Envoy bootstrap file (the repository's own, the test
bootstraps) held to the same rules as a shipped one: every HTTP connection
manager that runs the filter is hardened (see hcm_problems), the filter never
fails open and gets MESHLIMIT_SECRET from the host.

Writes OUT/<overlay>.yaml (the rendered manifests), OUT/alerts.rules.yaml (the
PrometheusRule's spec, a Prometheus rules file for promtool) and
OUT/configmap-rules-OVERLAY.yaml (the rules as that overlay's agents will read them).
"""

import argparse
import json
import pathlib
import re
import subprocess
import sys

import jsonschema
import kubernetes_validate
import yaml

DEPLOY = pathlib.Path(__file__).resolve().parent.parent
K8S_VERSION = "1.29.0"
SCHEMAS = {
    ("extensions.istio.io/v1alpha1", "WasmPlugin"): "wasmplugin.json",
    ("networking.istio.io/v1alpha3", "EnvoyFilter"): "envoyfilter.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule.json",
}
# The filter's plugin configuration keys (FilterConfig in filter/src/config.rs;
# the filter refuses others).
PLUGIN_KEYS = {"agent_cluster", "agent_authority", "timeout_ms", "sync_timeout_ms",
               "sync_interval_ms", "trusted_hops", "response_headers", "expected_nodes",
               "local_safety_factor", "agent_backoff_ms", "slots", "decision_log"}
AGENT = "meshlimit-agent"
# The agent's settings that carry credentials: never literal in a manifest.
SECRET_ENV = {"MESHLIMIT_STORE", "MESHLIMIT_REDIS_USERNAME", "MESHLIMIT_REDIS_PASSWORD", "MESHLIMIT_SECRET",
              "MESHLIMIT_OPERATOR_TOKEN"}
# The per-deployment secret every agent and every filter reads (the operator
# creates the Secret; docs/operations/deploying.md).
SECRET = ("MESHLIMIT_SECRET", "meshlimit-secret", "secret")
# The operator token (GET /v1/explain, /v1/hot): the agent's alone. Every
# meshed namespace holds meshlimit-secret, so no filter, sidecar or fleet may
# be handed this one (docs/operations/security.md).
OPERATOR = ("MESHLIMIT_OPERATOR_TOKEN", "meshlimit-operator", "token")
HCM_TYPE = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
WASM_TYPE_SUFFIX = "filters.http.wasm.v3.Wasm"


def render(overlay):
    """The overlay's manifests, as `kubectl apply -k` would send them."""
    out = subprocess.run(["kubectl", "kustomize", str(overlay)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{overlay}: kubectl kustomize failed:\n{out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def name_of(doc):
    meta = doc.get("metadata", {})
    return f"{doc.get('kind')}/{meta.get('namespace', '-')}/{meta.get('name')}"


def validate(docs):
    """Schema errors, one string each."""
    errors = []
    for doc in docs:
        key = (doc.get("apiVersion"), doc.get("kind"))
        try:
            if key in SCHEMAS:
                schema = json.loads((DEPLOY / "schemas" / SCHEMAS[key]).read_text())
                validator = jsonschema.Draft202012Validator(schema)
                for e in validator.iter_errors(doc):
                    path = ".".join(str(p) for p in e.absolute_path)
                    errors.append(f"{name_of(doc)}: {path}: {e.message}")
            else:
                kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.utils.ValidationError as e:
            path = ".".join(str(p) for p in e.absolute_path)
            errors.append(f"{name_of(doc)}: {path}: {e.message}")
        except kubernetes_validate.utils.SchemaNotFoundError as e:
            errors.append(f"{name_of(doc)}: no schema: {e.message}")
    return errors


def find(docs, kind, name=None):
    return [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]


def lint_pods(docs):
    """No workload mounts a ConfigMap or Secret through subPath: the kubelet
    updates those volumes by an atomic symlink swap a subPath never sees."""
    errors = []
    for doc in find(docs, "DaemonSet") + find(docs, "Deployment"):
        spec = doc["spec"]["template"]["spec"]
        watched = {v["name"] for v in spec.get("volumes", []) if "configMap" in v or "secret" in v}
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            for m in c.get("volumeMounts", []):
                if m["name"] in watched and "subPath" in m:
                    errors.append(f"{name_of(doc)}: {c['name']} mounts {m['name']} with subPath")
    return errors


def lint_agent(docs, rules_text):
    """The agent DaemonSet, its Service and its rules ConfigMap agree."""
    errors = []
    ds = find(docs, "DaemonSet", AGENT)
    svc = find(docs, "Service", AGENT)
    if len(ds) != 1 or len(svc) != 1:
        return [f"want one DaemonSet and one Service {AGENT}, got {len(ds)} and {len(svc)}"]
    ds, svc = ds[0], svc[0]
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    want = [
        (c.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/healthz", "liveness probe on /healthz"),
        (c.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/readyz", "readiness probe on /readyz"),
        (pod.get("securityContext", {}).get("runAsNonRoot") is True, "pod runAsNonRoot: true"),
        (c.get("securityContext", {}).get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem: true"),
        (c.get("securityContext", {}).get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation: false"),
        ("memory" in c.get("resources", {}).get("limits", {}), "a memory limit"),
        ("cpu" in c.get("resources", {}).get("requests", {}), "a CPU request"),
        (svc["spec"].get("internalTrafficPolicy") == "Local", "Service internalTrafficPolicy: Local"),
        (re.search(r"@sha256:[0-9a-f]{64}$", c.get("image", "")) is not None,
         "its image pinned by digest (make agent-oci writes it), or nodes run whatever the tag points at"),
    ]
    errors += [f"{name_of(ds)}: wants {what}" for ok, what in want if not ok]
    if not takes_secret(c):
        errors.append(f"{name_of(ds)}: {SECRET[0]} must come from secretKeyRef {SECRET[1]}/{SECRET[2]} "
                      "(the agent refuses to start without it; it authenticates the filters)")
    if pod.get("hostNetwork") or any("hostPort" in p for p in c.get("ports", [])):
        errors.append(f"{name_of(ds)}: hostNetwork/hostPort: a NetworkPolicy does not apply to the "
                      "host's network, and the agent's port would be open on the node's address")
    for env in c.get("env", []):
        if env["name"] in SECRET_ENV and "secretKeyRef" not in env.get("valueFrom", {}):
            errors.append(f"{name_of(ds)}: {env['name']} must come from a Secret")
    args = c.get("args", [])
    listen = args[args.index("--listen") + 1] if "--listen" in args else ""
    port = svc["spec"]["ports"][0]
    container_port = {p["name"]: p["containerPort"] for p in c.get("ports", [])}.get(port["targetPort"])
    if listen != f"0.0.0.0:{container_port}":
        errors.append(f"{name_of(ds)}: --listen {listen!r}, want 0.0.0.0:{container_port} (the Service's target)")
    errors += lint_rules_mount(docs, ds, c, pod, rules_text)
    return errors


def takes_secret(container):
    """The container's MESHLIMIT_SECRET comes from the Secret meshlimit-secret, key secret."""
    name, secret, key = SECRET
    for env in container.get("env", []):
        if env["name"] == name:
            ref = env.get("valueFrom", {}).get("secretKeyRef", {})
            return ref.get("name") == secret and ref.get("key") == key and not ref.get("optional")
    return False


def lint_network_policy(docs):
    """A NetworkPolicy selects the agent pods and admits only listed peers on
    the agent's port: no rule open to every source."""
    ds = find(docs, "DaemonSet", AGENT)
    if not ds:
        return []
    labels = ds[0]["spec"]["template"]["metadata"].get("labels", {})
    namespace = ds[0]["metadata"].get("namespace")
    selecting = [np for np in find(docs, "NetworkPolicy")
                 if np["metadata"].get("namespace") == namespace
                 and "Ingress" in np["spec"].get("policyTypes", ["Ingress"])
                 and np["spec"].get("podSelector", {}).get("matchLabels")
                 and np["spec"]["podSelector"]["matchLabels"].items() <= labels.items()]
    if not selecting:
        return [f"no NetworkPolicy in {namespace} selects the agent pods {labels}: any pod may call the agent"]
    errors = []
    for np in selecting:
        for i, rule in enumerate(np["spec"].get("ingress", [])):
            peers = rule.get("from", [])
            if not peers or any(not p for p in peers):
                errors.append(f"{name_of(np)}: ingress[{i}] admits every source")
            for p in peers:
                cidr = p.get("ipBlock", {}).get("cidr", "")
                if cidr.endswith("/0"):
                    errors.append(f"{name_of(np)}: ingress[{i}] admits {cidr}")
            if not rule.get("ports"):
                errors.append(f"{name_of(np)}: ingress[{i}] admits every port")
    return errors


def lint_rules_mount(docs, ds, c, pod, rules_text):
    args = c.get("args", [])
    rules_path = pathlib.PurePosixPath(args[args.index("--rules") + 1]) if "--rules" in args else None
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        cm_name = volumes.get(m["name"], {}).get("configMap", {}).get("name")
        if cm_name and rules_path and rules_path.parent == pathlib.PurePosixPath(m["mountPath"]):
            cms = find(docs, "ConfigMap", cm_name)
            data = cms[0]["data"] if cms else {}
            if rules_path.name not in data:
                return [f"{name_of(ds)}: --rules {rules_path}: ConfigMap {cm_name} has no key {rules_path.name}"]
            if data[rules_path.name] != rules_text:
                return [f"ConfigMap {cm_name}: {rules_path.name} differs from the overlay's rules file"]
            return []
    return [f"{name_of(ds)}: --rules {rules_path} is not in a mounted ConfigMap directory"]


def agent_host(docs):
    svc = find(docs, "Service", AGENT)[0]
    return f"{AGENT}.{svc['metadata']['namespace']}.svc.cluster.local", svc["spec"]["ports"][0]["port"]


def lint_plugin_config(where, cfg, cluster, host):
    errors = [f"{where}: unknown plugin config key {k}" for k in sorted(set(cfg) - PLUGIN_KEYS)]
    if cfg.get("agent_cluster") != cluster:
        errors.append(f"{where}: agent_cluster {cfg.get('agent_cluster')!r}, want {cluster!r}")
    if cfg.get("agent_authority") != host:
        errors.append(f"{where}: agent_authority {cfg.get('agent_authority')!r}, want {host!r}")
    if not isinstance(cfg.get("timeout_ms"), int):
        errors.append(f"{where}: timeout_ms must be set")
    return errors


def lint_istio(docs):
    errors = []
    host, port = agent_host(docs)
    for wp in find(docs, "WasmPlugin"):
        spec = wp["spec"]
        if spec.get("phase") != "AUTHZ":
            errors.append(f"{name_of(wp)}: want phase AUTHZ")
        if spec.get("failStrategy") != "FAIL_RELOAD":
            errors.append(f"{name_of(wp)}: failStrategy {spec.get('failStrategy')!r}, want FAIL_RELOAD "
                          "(FAIL_OPEN leaves a worker whose VM trapped unlimited for good)")
        env = {e["name"]: e for e in spec.get("vmConfig", {}).get("env", [])}
        if env.get(SECRET[0], {}).get("valueFrom") != "HOST":
            errors.append(f"{name_of(wp)}: vmConfig.env wants {SECRET[0]} valueFrom HOST")
        if not spec["url"].startswith("oci://"):
            errors.append(f"{name_of(wp)}: want an oci:// url")
        if not re.fullmatch(r"[0-9a-f]{64}", str(spec.get("sha256") or "")) and "@sha256:" not in spec["url"]:
            errors.append(f"{name_of(wp)}: the module is not pinned: set sha256 to its manifest digest "
                          "(make wasm-oci writes it), or Istio runs whatever the tag points at")
        if spec.get("priority") is None:
            errors.append(f"{name_of(wp)}: set a priority (its order among the phase's WasmPlugins)")
        errors += lint_plugin_config(name_of(wp), spec.get("pluginConfig", {}),
                                     f"outbound|{port}||{host}", host)
        if any(m.get("mode") in ("SERVER", "CLIENT_AND_SERVER", None) for m in spec.get("match", [{}])):
            errors += lint_inbound_envoyfilter(docs, wp)
    return errors


def lint_inbound_envoyfilter(docs, wp):
    """A WasmPlugin on sidecar inbound traffic comes with an EnvoyFilter, in the
    same namespace and selecting the same workloads, that hardens every sidecar
    inbound HTTP connection manager (Istio builds them with use_remote_address
    false, so the client address would come from X-Forwarded-For)."""
    selector = wp["spec"].get("selector", {}).get("matchLabels", {})
    patches = []
    for ef in find(docs, "EnvoyFilter"):
        if ef["metadata"].get("namespace") != wp["metadata"].get("namespace"):
            continue
        ef_selector = ef["spec"].get("workloadSelector", {}).get("labels", {})
        if not ef_selector.items() <= selector.items():
            continue
        for cp in ef["spec"].get("configPatches", []):
            match = cp.get("match", {})
            filt = match.get("listener", {}).get("filterChain", {}).get("filter", {})
            value = cp.get("patch", {}).get("value", {}).get("typed_config", {})
            if (cp.get("applyTo") == "NETWORK_FILTER" and match.get("context") in ("SIDECAR_INBOUND", "ANY")
                    and filt.get("name") == "envoy.filters.network.http_connection_manager"
                    and not match.get("listener", {}).get("portNumber")
                    and cp["patch"].get("operation") == "MERGE" and value.get("@type") == HCM_TYPE):
                patches.append((name_of(ef), value))
    if not patches:
        return [f"{name_of(wp)}: no EnvoyFilter MERGE-patches the HTTP connection manager of every "
                "sidecar inbound listener it runs in (use_remote_address, path normalisation, underscores)"]
    errors = []
    for where, value in patches:
        errors += [f"{where}: {p}" for p in hcm_problems(value)]
    return errors


def hcm_problems(hcm):
    """What leaves a way around a limit in an HTTP connection manager that runs
    the filter: the client address from X-Forwarded-For (use_remote_address
    unset), paths the rules and the backend read differently (no
    normalize_path, no merge_slashes, encoded slashes kept), headers with
    underscores a CGI backend folds into the dashed name."""
    problems = []
    if hcm.get("use_remote_address") is not True:
        problems.append("use_remote_address must be true (else the rightmost X-Forwarded-For entry, "
                        "which the client writes, becomes the address client_ip keys on)")
    if "xff_num_trusted_hops" not in hcm:
        problems.append("xff_num_trusted_hops must be explicit (0 unless a proxy in front appends to X-Forwarded-For)")
    if hcm.get("normalize_path") is not True:
        problems.append("normalize_path must be true (/./login, /%6Cogin walk around path: /login)")
    if hcm.get("merge_slashes") is not True:
        problems.append("merge_slashes must be true (//login walks around path: /login)")
    if hcm.get("path_with_escaped_slashes_action", "KEEP_UNCHANGED") in (
            "KEEP_UNCHANGED", "IMPLEMENTATION_SPECIFIC_DEFAULT"):
        problems.append("path_with_escaped_slashes_action must unescape, redirect or reject (%2F kept "
                        "walks around a path rule)")
    underscores = hcm.get("common_http_protocol_options", {}).get("headers_with_underscores_action")
    if underscores != "REJECT_REQUEST":
        problems.append("common_http_protocol_options.headers_with_underscores_action must be REJECT_REQUEST "
                        "(x_api_key skips a rule on x-api-key; CGI backends read it as X-Api-Key)")
    return problems


def bootstrap_problems(boot):
    """A whole Envoy bootstrap: every HCM that runs the filter is hardened, and
    every filter config neither fails open nor lacks the secret."""
    problems = []
    hcms = list(_typed(boot, HCM_TYPE))
    limited = [h for h in hcms if any(True for _ in _wasm_configs(h))]
    if not limited:
        problems.append("no HTTP connection manager runs the meshlimit wasm filter")
    for hcm in limited:
        problems += [f"HCM {hcm.get('stat_prefix')}: {p}" for p in hcm_problems(hcm)]
    for cfg in _wasm_configs(boot):
        name = cfg.get("name")
        if cfg.get("failure_policy", "UNSPECIFIED") in ("FAIL_OPEN",):
            problems.append(f"wasm {name}: failure_policy FAIL_OPEN leaves a trapped worker unlimited for good")
        if cfg.get("fail_open") is True:
            problems.append(f"wasm {name}: fail_open: true leaves a trapped worker unlimited for good")
        keys = cfg.get("vm_config", {}).get("environment_variables", {}).get("host_env_keys", [])
        if SECRET[0] not in keys:
            problems.append(f"wasm {name}: vm_config.environment_variables.host_env_keys lacks {SECRET[0]}")
    return problems


def _typed(node, type_url):
    if isinstance(node, dict):
        if node.get("@type") == type_url:
            yield node
        for v in node.values():
            yield from _typed(v, type_url)
    elif isinstance(node, list):
        for v in node:
            yield from _typed(v, type_url)


def _wasm_configs(node):
    if isinstance(node, dict):
        if node.get("@type", "").endswith(WASM_TYPE_SUFFIX):
            yield node.get("config", {})
        for v in node.values():
            yield from _wasm_configs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _wasm_configs(v)


def lint_envoy(docs):
    """A plain-Envoy bootstrap shipped in a ConfigMap reaches the agent Service."""
    errors = []
    host, port = agent_host(docs)
    for cm in find(docs, "ConfigMap"):
        if "envoy.yaml" not in cm.get("data", {}):
            continue
        boot = yaml.safe_load(cm["data"]["envoy.yaml"])
        clusters = {c["name"]: c for c in boot["static_resources"]["clusters"]}
        text = json.dumps(boot)
        for raw in _plugin_configs(boot["static_resources"]["listeners"]):
            cfg = json.loads(raw)
            name = cfg.get("agent_cluster")
            errors += lint_plugin_config(name_of(cm), cfg, name, host)
            la = clusters.get(name, {}).get("load_assignment", {})
            sockets = [e["endpoint"]["address"]["socket_address"]
                       for group in la.get("endpoints", []) for e in group.get("lb_endpoints", [])]
            if not any(s.get("address") == host and s.get("port_value") == port for s in sockets):
                errors.append(f"{name_of(cm)}: cluster {name} does not point at {host}:{port}")
        if "envoy.filters.http.wasm" not in text:
            errors.append(f"{name_of(cm)}: no wasm filter")
        errors += [f"{name_of(cm)}: {p}" for p in bootstrap_problems(boot)]
        errors += lint_envoy_workloads(docs, cm)
    return errors


def lint_envoy_workloads(docs, cm):
    """Every workload that mounts the bootstrap passes the secret to Envoy."""
    errors, users = [], 0
    for doc in find(docs, "DaemonSet") + find(docs, "Deployment"):
        if doc["metadata"].get("namespace") != cm["metadata"].get("namespace"):
            continue
        spec = doc["spec"]["template"]["spec"]
        volumes = {v["name"] for v in spec.get("volumes", [])
                   if v.get("configMap", {}).get("name") == cm["metadata"]["name"]}
        for c in spec.get("containers", []):
            if any(m["name"] in volumes for m in c.get("volumeMounts", [])):
                users += 1
                if not takes_secret(c):
                    errors.append(f"{name_of(doc)}: container {c['name']} runs the filter but its "
                                  f"{SECRET[0]} is not from secretKeyRef {SECRET[1]}/{SECRET[2]}")
    if not users:
        errors.append(f"{name_of(cm)}: no workload mounts this bootstrap")
    return errors


def _plugin_configs(node):
    if isinstance(node, dict):
        if node.get("@type", "").endswith("filters.http.wasm.v3.Wasm"):
            yield node["config"]["configuration"]["value"]
        for v in node.values():
            yield from _plugin_configs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _plugin_configs(v)


def lint_operator_token(docs):
    """The agent takes MESHLIMIT_OPERATOR_TOKEN from the Secret
    meshlimit-operator; nothing else names that Secret or that variable."""
    errors = []
    name, secret, key = OPERATOR
    for doc in docs:
        if doc.get("kind") == "DaemonSet" and doc["metadata"].get("name") == AGENT:
            c = doc["spec"]["template"]["spec"]["containers"][0]
            env = next((e for e in c.get("env", []) if e["name"] == name), None)
            ref = (env or {}).get("valueFrom", {}).get("secretKeyRef", {})
            if (ref.get("name"), ref.get("key")) != (secret, key):
                errors.append(f"{name_of(doc)}: {name} must come from secretKeyRef {secret}/{key}")
            continue
        text = yaml.safe_dump(doc)
        if secret in text or name in text:
            errors.append(f"{name_of(doc)}: names {secret} or {name}: the operator token is the agent's "
                          "alone (a filter's namespace must not hold it)")
    return errors


def lint(docs, rules_text):
    return (lint_pods(docs) + lint_agent(docs, rules_text) + lint_network_policy(docs)
            + lint_istio(docs) + lint_envoy(docs) + lint_operator_token(docs))


def check_bootstraps(paths):
    """(errors, oks) for each bootstrap file given with --bootstrap."""
    errors, oks = [], []
    for path in paths:
        try:
            boot = yaml.safe_load(pathlib.Path(path).read_text())
        except (OSError, yaml.YAMLError) as e:
            errors.append(f"{path}: {e}")
            continue
        problems = bootstrap_problems(boot)
        errors += [f"{path}: {p}" for p in problems]
        if not problems:
            oks.append(str(path))
    return errors, oks


def rules_of(overlay):
    """The rules file an overlay ships: its own rules.yaml (the Istio overlay's
    sidecar rules), else the base's (deploy/rules.yaml, the gateway rules)."""
    own = overlay / "rules.yaml"
    return own if own.exists() else DEPLOY / "rules.yaml"


def write_outputs(out, overlay, docs):
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{overlay.name}.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    for pr in find(docs, "PrometheusRule"):
        (out / "alerts.rules.yaml").write_text(yaml.safe_dump(pr["spec"], sort_keys=False))
    for cm in find(docs, "ConfigMap", "meshlimit-rules"):
        (out / f"configmap-rules-{overlay.name}.yaml").write_text(cm["data"]["rules.yaml"])
    for cm in find(docs, "ConfigMap", "meshlimit-dashboard"):
        (out / "dashboard.json").write_text(cm["data"]["meshlimit.json"])
        (out / "dashboard-queries.rules.yaml").write_text(
            yaml.safe_dump(dashboard_rules(json.loads(cm["data"]["meshlimit.json"]))))
    for cm in find(docs, "ConfigMap"):
        if "envoy.yaml" in cm.get("data", {}):
            (out / "envoy-fleet.yaml").write_text(cm["data"]["envoy.yaml"])
    for wp in find(docs, "WasmPlugin"):
        (out / "envoy-wasmplugin.yaml").write_text(yaml.safe_dump(as_sidecar(wp["spec"]["pluginConfig"])))


def dashboard_rules(dashboard):
    """Every panel query as a recording rule, Grafana variables filled in, so
    `promtool check rules` parses the dashboard's PromQL."""
    fill = {"$__rate_interval": "5m", "$node": ".*", "$rule": ".*", "${datasource}": ""}
    rules = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for var, value in fill.items():
                expr = expr.replace(var, value)
            if "$" in expr:
                raise SystemExit(f"dashboard panel {panel['title']!r}: unknown variable in {expr}")
            rules.append({"record": f"dashboard:panel_{panel['id']}:{target['refId']}", "expr": expr})
    return {"groups": [{"name": "dashboard-queries", "rules": rules}]}


def as_sidecar(plugin_config):
    """The fleet bootstrap carrying a WasmPlugin's pluginConfig the way Istio hands
    it to the filter (a JSON string), its agent cluster named as in a sidecar: so
    a real Envoy with the real filter can check the WasmPlugin's configuration."""
    boot = yaml.safe_load((DEPLOY / "envoy" / "envoy.yaml").read_text())
    for cluster in boot["static_resources"]["clusters"]:
        if cluster["name"] == "meshlimit_agent":
            cluster["name"] = cluster["load_assignment"]["cluster_name"] = plugin_config["agent_cluster"]
    stack = [boot]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("@type", "").endswith("filters.http.wasm.v3.Wasm"):
                node["config"]["configuration"]["value"] = json.dumps(plugin_config)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return boot


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--bootstrap", action="append", default=[], type=pathlib.Path,
                    help="an Envoy bootstrap whose filter HCMs must be hardened (repeatable)")
    ap.add_argument("overlays", nargs="+", type=pathlib.Path)
    args = ap.parse_args()
    failed = False
    for overlay in args.overlays:
        docs = render(overlay)
        errors = validate(docs) + lint(docs, rules_of(overlay).read_text())
        kinds = sorted({d["kind"] for d in docs})
        for e in errors:
            print(f"FAIL {overlay}: {e}")
        if not errors:
            print(f"ok   {overlay}: {len(docs)} objects valid (Kubernetes {K8S_VERSION} strict; "
                  f"CRDs against deploy/schemas): {', '.join(kinds)}")
        failed |= bool(errors)
        write_outputs(args.out, overlay, docs)
    errors, oks = check_bootstraps(args.bootstrap)
    for e in errors:
        print(f"FAIL {e}")
    if oks:
        print(f"ok   hardened (use_remote_address, path normalisation, no underscores, no FAIL_OPEN, "
              f"{SECRET[0]} from the host): {', '.join(oks)}")
    failed |= bool(errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
