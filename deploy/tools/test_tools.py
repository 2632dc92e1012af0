"""Tests of the deploy checks themselves: each must fail on the breakage it exists for.

    python -m unittest discover -s deploy/tools -p 'test_*.py'
"""

import copy
import json
import pathlib
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest

import yaml

import alerts_check
import manifests
import metrics_check
import schema_check
import oci

DEPLOY = pathlib.Path(__file__).resolve().parent.parent
RULES = (DEPLOY / "rules.yaml").read_text()
ISTIO_RULES = (DEPLOY / "overlays" / "istio" / "rules.yaml").read_text()
ISTIO = manifests.render(DEPLOY / "overlays" / "istio")
ENVOY = manifests.render(DEPLOY / "overlays" / "envoy")

EXPOSITION = textwrap.dedent("""\
    # TYPE meshlimit_decisions_total counter
    meshlimit_decisions_total{rule="r",outcome="allowed"} 1
    # TYPE meshlimit_fail_open_ratio gauge
    meshlimit_fail_open_ratio{rule="r"} 0
    # TYPE meshlimit_rules_reloads_total counter
    meshlimit_rules_reloads_total{result="ok"} 1
    # TYPE meshlimit_rules_version_info gauge
    meshlimit_rules_version_info{version="v"} 1
    # TYPE meshlimit_filter_rules_version_info gauge
    meshlimit_filter_rules_version_info{filter="f",version="v"} 1
    # TYPE meshlimit_store_requests_total counter
    meshlimit_store_requests_total{result="ok"} 1
    # TYPE meshlimit_store_latency_seconds histogram
    meshlimit_store_latency_seconds_bucket{le="+Inf"} 1
    meshlimit_store_latency_seconds_sum 0.001
    meshlimit_store_latency_seconds_count 1
    # TYPE meshlimit_rule_limit gauge
    meshlimit_rule_limit{rule="r",plan="",what="rate_per_second"} 1
    # TYPE meshlimit_leases_granted_total counter
    meshlimit_leases_granted_total{rule="r"} 1
    # TYPE meshlimit_lease_tokens_granted_total counter
    meshlimit_lease_tokens_granted_total{rule="r"} 1
    # TYPE meshlimit_false_limits_total counter
    meshlimit_false_limits_total{rule="r"} 0
    # TYPE meshlimit_false_limit_checks_total counter
    meshlimit_false_limit_checks_total{rule="r"} 1
    # TYPE meshlimit_false_limit_ratio gauge
    meshlimit_false_limit_ratio{rule="r"} 0
    # TYPE meshlimit_fleet_override gauge
    meshlimit_fleet_override 0
    # TYPE meshlimit_fleet_pin_missing gauge
    meshlimit_fleet_pin_missing 0
    # TYPE meshlimit_rules_trial_held gauge
    meshlimit_rules_trial_held 0
    # TYPE meshlimit_control_refused_total counter
    meshlimit_control_refused_total{record="override",reason="mac"} 0
    """)


def problems(docs, change):
    """What the checks find in `docs` (ISTIO or ENVOY) after `change`, held to
    the rules file that overlay ships, so only the change can be found."""
    rules = ISTIO_RULES if docs is ISTIO else RULES
    docs = copy.deepcopy(docs)
    change(docs)
    return manifests.validate(docs) + manifests.lint(docs, rules)


def agent_container(docs):
    return manifests.find(docs, "DaemonSet", "meshlimit-agent")[0]["spec"]["template"]["spec"]["containers"][0]


def wasm_plugin(docs):
    return manifests.find(docs, "WasmPlugin")[0]["spec"]


def agent_env(docs, name="MESHLIMIT_SECRET"):
    return next(e for e in agent_container(docs)["env"] if e["name"] == name)


def network_policy(docs):
    return manifests.find(docs, "NetworkPolicy", "meshlimit-agent")[0]["spec"]


def inbound_patch(docs):
    """The HCM fields meshlimit's EnvoyFilter merges into sidecar inbound listeners."""
    ef = manifests.find(docs, "EnvoyFilter")[0]["spec"]
    return ef["configPatches"][0]["patch"]["value"]["typed_config"]


def fleet(change):
    """A change to the plain-Envoy fleet's bootstrap (the wasm config and its HCM), in its ConfigMap."""
    def apply(docs):
        cm = next(c for c in manifests.find(docs, "ConfigMap") if "envoy.yaml" in c.get("data", {}))
        boot = yaml.safe_load(cm["data"]["envoy.yaml"])
        hcm = next(manifests._typed(boot, manifests.HCM_TYPE))
        change(hcm, next(manifests._wasm_configs(boot)))
        cm["data"]["envoy.yaml"] = yaml.safe_dump(boot)
    return apply


def operator_env(docs):
    return next(e for e in agent_container(docs)["env"] if e["name"] == "MESHLIMIT_OPERATOR_TOKEN")


def fleet_container(docs):
    return manifests.find(docs, "Deployment", "edge-envoy")[0]["spec"]["template"]["spec"]["containers"][0]


# Each breakage of the trust boundary the deploy checks exist for, on the
# overlay it concerns: the check must report it.
TRUST_BREAKAGES = {
    "istio": {
        "agent without MESHLIMIT_SECRET": lambda d: agent_container(d)["env"].remove(agent_env(d)),
        "agent secret as a literal": lambda d: agent_env(d).update(value="x" * 64) or agent_env(d).pop("valueFrom"),
        "agent secret from another Secret": lambda d: agent_env(d)["valueFrom"]["secretKeyRef"].update(
            name="other"),
        "agent secret optional": lambda d: agent_env(d)["valueFrom"]["secretKeyRef"].update(optional=True),
        "agent operator token literal": lambda d: operator_env(d).update(value="x" * 64) or
        operator_env(d).pop("valueFrom"),
        "operator token handed to the sidecars": lambda d: wasm_plugin(d)["vmConfig"]["env"].append(
            {"name": "MESHLIMIT_OPERATOR_TOKEN", "valueFrom": "HOST"}),
        "agent on hostNetwork": lambda d: manifests.find(d, "DaemonSet", "meshlimit-agent")[0]["spec"][
            "template"]["spec"].update(hostNetwork=True),
        "agent hostPort": lambda d: agent_container(d)["ports"][0].update(hostPort=8081),
        "no NetworkPolicy": lambda d: d.remove(manifests.find(d, "NetworkPolicy", "meshlimit-agent")[0]),
        "NetworkPolicy selects other pods": lambda d: network_policy(d)["podSelector"].update(
            matchLabels={"app.kubernetes.io/name": "other"}),
        "NetworkPolicy rule without from": lambda d: network_policy(d)["ingress"][0].pop("from"),
        "NetworkPolicy empty peer": lambda d: network_policy(d)["ingress"][0]["from"].append({}),
        "NetworkPolicy 0.0.0.0/0": lambda d: network_policy(d)["ingress"][0]["from"].append(
            {"ipBlock": {"cidr": "0.0.0.0/0"}}),
        "NetworkPolicy every port": lambda d: network_policy(d)["ingress"][0].pop("ports"),
        "WasmPlugin FAIL_OPEN": lambda d: wasm_plugin(d).update(failStrategy="FAIL_OPEN"),
        "WasmPlugin default failStrategy": lambda d: wasm_plugin(d).pop("failStrategy"),
        "WasmPlugin without the secret": lambda d: wasm_plugin(d).pop("vmConfig"),
        "WasmPlugin secret inline": lambda d: wasm_plugin(d)["vmConfig"]["env"][0].update(valueFrom="INLINE"),
        "no inbound EnvoyFilter": lambda d: d.remove(manifests.find(d, "EnvoyFilter")[0]),
        "EnvoyFilter on outbound": lambda d: manifests.find(d, "EnvoyFilter")[0]["spec"]["configPatches"][0][
            "match"].update(context="SIDECAR_OUTBOUND"),
        "EnvoyFilter for one port": lambda d: manifests.find(d, "EnvoyFilter")[0]["spec"]["configPatches"][0][
            "match"]["listener"].update(portNumber=8080),
        "EnvoyFilter for other workloads": lambda d: manifests.find(d, "EnvoyFilter")[0]["spec"].update(
            workloadSelector={"labels": {"app": "one"}}),
        "inbound use_remote_address false": lambda d: inbound_patch(d).update(use_remote_address=False),
        "inbound xff_num_trusted_hops unset": lambda d: inbound_patch(d).pop("xff_num_trusted_hops"),
        "inbound normalize_path unset": lambda d: inbound_patch(d).pop("normalize_path"),
        "inbound merge_slashes false": lambda d: inbound_patch(d).update(merge_slashes=False),
        "inbound escaped slashes kept": lambda d: inbound_patch(d).update(
            path_with_escaped_slashes_action="KEEP_UNCHANGED"),
        "inbound underscores allowed": lambda d: inbound_patch(d)["common_http_protocol_options"].update(
            headers_with_underscores_action="ALLOW"),
        "EnvoyFilter unknown field": lambda d: manifests.find(d, "EnvoyFilter")[0]["spec"].update(priorty=1),
    },
    "envoy": {
        "fleet FAIL_OPEN": fleet(lambda h, w: w.update(failure_policy="FAIL_OPEN")),
        "fleet fail_open": fleet(lambda h, w: w.pop("failure_policy") and w.update(fail_open=True)),
        "fleet without host_env_keys": fleet(lambda h, w: w["vm_config"].pop("environment_variables")),
        "fleet use_remote_address unset": fleet(lambda h, w: h.pop("use_remote_address")),
        "fleet xff_num_trusted_hops unset": fleet(lambda h, w: h.pop("xff_num_trusted_hops")),
        "fleet normalize_path false": fleet(lambda h, w: h.update(normalize_path=False)),
        "fleet merge_slashes unset": fleet(lambda h, w: h.pop("merge_slashes")),
        "fleet escaped slashes unset": fleet(lambda h, w: h.pop("path_with_escaped_slashes_action")),
        "fleet underscores unset": fleet(lambda h, w: h.pop("common_http_protocol_options")),
        "fleet Envoy without the secret": lambda d: fleet_container(d).pop("env"),
        "fleet Envoy given the operator token": lambda d: fleet_container(d)["env"].append(
            {"name": "MESHLIMIT_OPERATOR_TOKEN",
             "valueFrom": {"secretKeyRef": {"name": "meshlimit-operator", "key": "token"}}}),
        "fleet Envoy secret literal": lambda d: fleet_container(d)["env"][0].update(value="x") or
        fleet_container(d)["env"][0].pop("valueFrom"),
        "agent without MESHLIMIT_SECRET": lambda d: agent_container(d)["env"].remove(agent_env(d)),
        "no NetworkPolicy": lambda d: d.remove(manifests.find(d, "NetworkPolicy", "meshlimit-agent")[0]),
    },
}


class ManifestTests(unittest.TestCase):
    def test_overlays_are_clean(self):
        self.assertEqual(manifests.validate(ISTIO) + manifests.lint(ISTIO, ISTIO_RULES), [])
        self.assertEqual(manifests.validate(ENVOY) + manifests.lint(ENVOY, RULES), [])

    def test_breakages_are_caught(self):
        cases = {
            "unknown field in a standard kind": lambda d: agent_container(d).update(imagePullPolcy="Always"),
            "subPath rules mount": lambda d: agent_container(d)["volumeMounts"][0].update(subPath="rules.yaml"),
            "agent listens on loopback": lambda d: agent_container(d)["args"].__setitem__(4, "127.0.0.1:8081"),
            "no readiness probe": lambda d: agent_container(d).pop("readinessProbe"),
            "writable root filesystem": lambda d: agent_container(d)["securityContext"].pop("readOnlyRootFilesystem"),
            "agent image by tag only": lambda d: agent_container(d).update(
                image="registry.example.com/meshlimit/meshlimit-agent:0.1.0"),
            "unknown WasmPlugin field": lambda d: wasm_plugin(d).update(failstrategy="FAIL_OPEN"),
            "WasmPlugin phase": lambda d: wasm_plugin(d).update(phase="STATS"),
            "agent cluster namespace": lambda d: wasm_plugin(d)["pluginConfig"].update(
                agent_cluster="outbound|8081||meshlimit-agent.default.svc.cluster.local"),
            "unknown plugin config key": lambda d: wasm_plugin(d)["pluginConfig"].update(timeout=5),
            "WasmPlugin url scheme": lambda d: wasm_plugin(d).update(url="ftp://example.com/x"),
            "selector and targetRefs": lambda d: wasm_plugin(d).update(
                selector={"matchLabels": {"a": "b"}}, targetRefs=[{"kind": "Gateway", "name": "g"}]),
            "PodMonitor without selector": lambda d: manifests.find(d, "PodMonitor")[0]["spec"].pop("selector"),
            "PodMonitor bad interval": lambda d: manifests.find(d, "PodMonitor")[0]["spec"][
                "podMetricsEndpoints"][0].update(interval="15 seconds"),
            "rule with alert and record": lambda d: manifests.find(d, "PrometheusRule")[0]["spec"][
                "groups"][0]["rules"][0].update(record="x"),
            "literal password": lambda d: agent_container(d)["env"].append(
                {"name": "MESHLIMIT_REDIS_PASSWORD", "value": "hunter2"}),
            "Service not node-local": lambda d: manifests.find(d, "Service", "meshlimit-agent")[0][
                "spec"].pop("internalTrafficPolicy"),
            "rules ConfigMap drifted": lambda d: manifests.find(d, "ConfigMap", "meshlimit-rules")[0][
                "data"].update({"rules.yaml": "version: 1\n"}),
        }
        for what, change in cases.items():
            with self.subTest(what):
                self.assertNotEqual(problems(ISTIO, change), [], what)

    def test_trust_breakages_are_caught(self):
        for overlay, cases in TRUST_BREAKAGES.items():
            docs = {"istio": ISTIO, "envoy": ENVOY}[overlay]
            for what, change in cases.items():
                with self.subTest(overlay=overlay, breakage=what):
                    self.assertNotEqual(problems(docs, change), [], what)

    def test_bootstrap_files_are_held_to_the_same_rules(self):
        """--bootstrap: a file that is the fleet's bootstrap passes; each of its
        breakages fails, and so does a file whose HCMs run no filter at all."""
        good = yaml.safe_load((DEPLOY / "envoy" / "envoy.yaml").read_text())
        breakages = {
            "FAIL_OPEN": lambda h, w: w.update(failure_policy="FAIL_OPEN"),
            "no secret": lambda h, w: w["vm_config"].pop("environment_variables"),
            "XFF address": lambda h, w: h.update(use_remote_address=False),
            "no normalize_path": lambda h, w: h.pop("normalize_path"),
            "no merge_slashes": lambda h, w: h.pop("merge_slashes"),
            "escaped slashes kept": lambda h, w: h.update(
                path_with_escaped_slashes_action="IMPLEMENTATION_SPECIFIC_DEFAULT"),
            "underscores dropped, not rejected": lambda h, w: h["common_http_protocol_options"].update(
                headers_with_underscores_action="DROP_HEADER"),
            "no filter": lambda h, w: h.update(http_filters=[f for f in h["http_filters"]
                                                             if f["name"] != "envoy.filters.http.wasm"]),
        }
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "envoy.yaml"
            path.write_text(yaml.safe_dump(good))
            self.assertEqual(manifests.check_bootstraps([path]), ([], [str(path)]))
            for what, change in breakages.items():
                with self.subTest(what):
                    boot = copy.deepcopy(good)
                    change(next(manifests._typed(boot, manifests.HCM_TYPE)), next(manifests._wasm_configs(boot)))
                    path.write_text(yaml.safe_dump(boot))
                    errors, oks = manifests.check_bootstraps([path])
                    self.assertNotEqual(errors, [], what)
                    self.assertEqual(oks, [])

    def test_envoy_fleet_must_reach_the_agent_service(self):
        def repoint(docs):
            cm = next(c for c in manifests.find(docs, "ConfigMap") if "envoy.yaml" in c.get("data", {}))
            cm["data"]["envoy.yaml"] = cm["data"]["envoy.yaml"].replace(
                "meshlimit-agent.meshlimit.svc", "meshlimit-agent.default.svc")
        self.assertTrue(any("does not point at" in p for p in problems(ENVOY, repoint)))


class WasmPluginTests(unittest.TestCase):
    EXAMPLE = list(yaml.safe_load_all((DEPLOY / "istio" / "examples" / "one-workload.yaml").read_text()))

    def test_unpinned_or_unordered_plugin_is_caught(self):
        def unpin(docs):
            del wasm_plugin(docs)["sha256"]
        self.assertTrue(any("not pinned" in p for p in problems(ISTIO, unpin)))

        def unorder(docs):
            del wasm_plugin(docs)["priority"]
        self.assertTrue(any("priority" in p for p in problems(ISTIO, unorder)))

    def test_one_workload_example_is_valid(self):
        # Against the CRD schemas, and linted beside the agents: its EnvoyFilter
        # selects the WasmPlugin's workload in its namespace.
        self.assertEqual(manifests.validate(self.EXAMPLE), [])
        docs = [d for d in ISTIO if d["kind"] not in ("WasmPlugin", "EnvoyFilter")] + self.EXAMPLE
        self.assertEqual(manifests.lint_istio(docs), [])
        self.assertEqual(wasm_plugin(self.EXAMPLE)["sha256"], wasm_plugin(ISTIO)["sha256"])

        # Without its EnvoyFilter, the lint catches the unhardened listener.
        alone = [d for d in docs if d["kind"] != "EnvoyFilter"]
        self.assertNotEqual(manifests.lint_istio(alone), [])

    def test_pin_writes_the_digest(self):
        with tempfile.TemporaryDirectory() as tmp:
            plugin = pathlib.Path(tmp) / "wp.yaml"
            plugin.write_text((DEPLOY / "istio" / "wasmplugin.yaml").read_text())
            oci.pin(oci.FILTER, plugin, "sha256:" + "ab" * 32)
            spec = yaml.safe_load(plugin.read_text())["spec"]
            self.assertEqual(spec["sha256"], "ab" * 32)
            with self.assertRaises(ValueError):
                oci.pin(oci.FILTER, plugin, "latest")

    def test_pin_writes_the_agent_image_digest_and_pinned_reads_it_back(self):
        with tempfile.TemporaryDirectory() as tmp:
            k = pathlib.Path(tmp) / "kustomization.yaml"
            k.write_text((DEPLOY / "overlays" / "istio" / "kustomization.yaml").read_text())
            for digest in ("ab" * 32, "cd" * 32):  # a second pin replaces the first
                oci.pin(oci.AGENT, k, "sha256:" + digest)
                entry = [i for i in yaml.safe_load(k.read_text())["images"]
                         if i["name"].endswith("/meshlimit-agent")]
                self.assertEqual(entry, [{"name": "registry.example.com/meshlimit/meshlimit-agent",
                                          "newTag": "0.1.0", "digest": f"sha256:{digest}"}])
                self.assertEqual(oci.pinned(k), (oci.AGENT, digest))


class MetricsTests(unittest.TestCase):
    def used(self):
        dashboard = json.loads((DEPLOY / "monitoring" / "dashboard.json").read_text())
        rule = manifests.find(ISTIO, "PrometheusRule")[0]["spec"]
        return metrics_check.used_names(dashboard, rule)

    def test_dashboard_and_alerts_use_the_contract_names(self):
        self.assertIn("meshlimit_store_latency_seconds_bucket", self.used())
        self.assertIn("meshlimit_fail_open_ratio", self.used())
        self.assertEqual(metrics_check.compare(self.used(), EXPOSITION)[0], [])

    def test_a_missing_metric_fails(self):
        text = EXPOSITION.replace("meshlimit_lease_tokens_granted_total", "meshlimit_lease_tokens_total")
        errors, _ = metrics_check.compare(self.used(), text)
        self.assertEqual(len(errors), 1)
        self.assertIn("meshlimit_lease_tokens_granted_total", errors[0])

    def test_histogram_family_must_be_queried_by_series(self):
        errors, _ = metrics_check.compare({"meshlimit_store_latency_seconds"}, EXPOSITION)
        self.assertIn("is a histogram", errors[0])

    def test_region_share_is_allowed_until_exported(self):
        errors, notes = metrics_check.compare({"meshlimit_region_share"}, EXPOSITION)
        self.assertEqual((errors, len(notes)), ([], 1))
        text = EXPOSITION + '# TYPE meshlimit_region_share gauge\nmeshlimit_region_share{rule="r"} 0.5\n'
        errors, _ = metrics_check.compare({"meshlimit_region_share"}, text)
        self.assertIn("remove it from NOT_YET_EXPORTED", errors[0])

    def test_scrapes_a_running_agent_process(self):
        """The process path (free port, readiness wait, scrape, stop) against a stand-in agent."""
        with tempfile.TemporaryDirectory() as tmp:
            fake = pathlib.Path(tmp) / "fake-agent"
            fake.write_text(FAKE_AGENT.format(python=sys.executable, text=json.dumps(EXPOSITION)))
            fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
            dash, alerts = pathlib.Path(tmp) / "d.json", pathlib.Path(tmp) / "a.yaml"
            dash.write_text((DEPLOY / "monitoring" / "dashboard.json").read_text())
            rule = manifests.find(ISTIO, "PrometheusRule")[0]["spec"]
            alerts.write_text(json.dumps(rule))
            out = subprocess.run([sys.executable, metrics_check.__file__, "--dashboard", str(dash),
                                  "--alerts", str(alerts), "--agent", str(fake)],
                                 capture_output=True, text=True, timeout=60, check=False)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            self.assertIn("meshlimit_region_share: not yet exported", out.stdout)


FAKE_AGENT = """#!{python}
import http.server, sys
text = {text}
listen = sys.argv[sys.argv.index("--listen") + 1]
host, port = listen.rsplit(":", 1)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = (text if self.path == "/metrics" else "ok").encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer((host, int(port)), H).serve_forever()
"""


REPO = DEPLOY.parent
PROMETHEUS_RULE = yaml.safe_load((DEPLOY / "monitoring" / "prometheusrule.yaml").read_text())
ALERT_TESTS = yaml.safe_load((DEPLOY / "monitoring" / "tests.yaml").read_text())
RUNBOOKS = REPO / "docs" / "runbooks"


class AlertsTests(unittest.TestCase):
    def test_shipped_alerts_pass(self):
        self.assertEqual(alerts_check.problems(PROMETHEUS_RULE, ALERT_TESTS, RUNBOOKS), [])

    def test_a_missing_runbook_or_test_fails(self):
        rules = copy.deepcopy(PROMETHEUS_RULE)
        first = rules["spec"]["groups"][0]["rules"][0]
        del first["annotations"]["runbook_url"]
        found = alerts_check.problems(rules, ALERT_TESTS, RUNBOOKS)
        self.assertTrue(any("no runbook_url" in p for p in found), found)

        rules = copy.deepcopy(PROMETHEUS_RULE)
        rules["spec"]["groups"][0]["rules"][0]["annotations"]["runbook_url"] = "https://x/nope.md"
        found = alerts_check.problems(rules, ALERT_TESTS, RUNBOOKS)
        self.assertTrue(any("names no file" in p for p in found), found)

        for keep_firing in (True, False):
            tests = copy.deepcopy(ALERT_TESTS)
            for case in tests["tests"]:
                case["alert_rule_test"] = [
                    t for t in case.get("alert_rule_test", [])
                    if t["alertname"] != "MeshlimitStoreErrors" or bool(t["exp_alerts"]) == keep_firing
                ]
            found = alerts_check.problems(PROMETHEUS_RULE, tests, RUNBOOKS)
            want = "stays silent" if keep_firing else "fires"
            self.assertIn(f"MeshlimitStoreErrors: no promtool test where it {want}", found)


class SchemaTests(unittest.TestCase):
    SCHEMA = json.loads((REPO / "docs" / "rules.schema.json").read_text())
    FIXTURES = REPO / "core" / "tests" / "fixtures"

    def test_examples_pass_and_bad_fixtures_fail(self):
        found, checked = schema_check.problems(
            self.SCHEMA,
            [DEPLOY / "rules.yaml", self.FIXTURES / "good-full.yaml"],
            [self.FIXTURES / "bad-unknown-field.yaml", self.FIXTURES / "bad-nine.yaml"],
            [REPO / "README.md", *sorted((REPO / "docs" / "guide").glob("*.md"))],
        )
        self.assertEqual(found, [])
        self.assertGreaterEqual(checked, 10)

    def test_a_bad_file_given_as_good_fails_and_the_reverse(self):
        found, _ = schema_check.problems(
            self.SCHEMA, [self.FIXTURES / "bad-zero.yaml"], [self.FIXTURES / "good-minimal.yaml"])
        self.assertTrue(any("bad-zero.yaml" in p and "minimum" in p for p in found), found)
        self.assertTrue(any("a bad fixture the schema accepts" in p for p in found), found)


class OciTests(unittest.TestCase):
    MODULE = b"\0asm\x01\0\0\0" + b"\0" * 64

    def test_pack_is_deterministic_and_verifies(self):
        with tempfile.TemporaryDirectory() as tmp:
            a, b = pathlib.Path(tmp) / "a", pathlib.Path(tmp) / "b"
            self.assertEqual(oci.pack(oci.FILTER, self.MODULE, a, "1"), oci.pack(oci.FILTER, self.MODULE, b, "1"))
            self.assertEqual(oci.verify(a, self.MODULE)[1], oci.pack(oci.FILTER, self.MODULE, a, "1"))
            self.assertNotEqual(oci.pack(oci.FILTER, self.MODULE + b"\1", b, "1"), oci.verify(a)[1])

    def test_tampering_is_caught(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / "l"
            for tamper in (self.flip_a_blob, self.drop_compat, self.stray_blob):
                oci.pack(oci.FILTER, self.MODULE, out, "1")
                tamper(out)
                with self.subTest(tamper.__name__), self.assertRaises(oci.LayoutError):
                    oci.verify(out, self.MODULE)

    def test_refuses_a_non_module_and_a_foreign_directory(self):
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaises(oci.LayoutError):
                oci.pack(oci.FILTER, b"ELF", pathlib.Path(tmp) / "x", "1")
            (pathlib.Path(tmp) / "keep.txt").write_text("mine")
            with self.assertRaises(oci.LayoutError):
                oci.pack(oci.FILTER, self.MODULE, pathlib.Path(tmp), "1")
            self.assertTrue((pathlib.Path(tmp) / "keep.txt").exists())

    BINARY = b"\x7fELF\x02\x01\x01" + b"\0" * 64

    def test_the_agent_image_runs_its_binary_as_the_unprivileged_user(self):
        with tempfile.TemporaryDirectory() as tmp:
            a, b = pathlib.Path(tmp) / "a", pathlib.Path(tmp) / "b"
            digest = oci.pack(oci.AGENT, self.BINARY, a, "1")
            self.assertEqual(oci.pack(oci.AGENT, self.BINARY, b, "1"), digest)
            self.assertEqual(oci.verify(a, self.BINARY), (oci.AGENT, digest))
            manifest = json.loads((a / "blobs" / "sha256" / digest.split(":")[1]).read_text())
            config = json.loads((a / "blobs" / "sha256" / manifest["config"]["digest"].split(":")[1]).read_text())
            self.assertEqual((config["os"], config["architecture"]), ("linux", "amd64"))
            self.assertEqual(config["config"]["User"], "65532:65532")
            self.assertEqual(config["config"]["Entrypoint"], ["/usr/local/bin/meshlimit-agent"])
            with self.assertRaises(oci.LayoutError):  # another binary than the one given
                oci.verify(a, self.BINARY + b"\1")
            with self.assertRaises(oci.LayoutError):  # a module is no agent
                oci.pack(oci.AGENT, self.MODULE, b, "1")

    def test_the_two_images_cannot_pass_for_each_other(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / "l"
            oci.pack(oci.AGENT, self.BINARY, out, "1")
            self.retitle(out, "meshlimit-filter")
            with self.assertRaises(oci.LayoutError):
                oci.verify(out)

    @staticmethod
    def retitle(out, title):
        OciTests.rewrite_manifest(out, lambda m: m["annotations"].update(
            {"org.opencontainers.image.title": title}))

    @staticmethod
    def rewrite_manifest(out, change):
        """The layout's manifest changed by `change`, re-hashed and re-indexed:
        consistent, so only what `change` did can be caught."""
        index = json.loads((out / "index.json").read_text())
        digest = index["manifests"][0]["digest"].split(":")[1]
        path = out / "blobs" / "sha256" / digest
        manifest = json.loads(path.read_text())
        change(manifest)
        data = oci.canonical(manifest)
        new = oci.sha256(data)
        path.unlink()
        (out / "blobs" / "sha256" / new.split(":")[1]).write_bytes(data)
        index["manifests"][0].update(digest=new, size=len(data))
        (out / "index.json").write_bytes(oci.canonical(index))

    @staticmethod
    def flip_a_blob(out):
        blob = sorted((out / "blobs" / "sha256").iterdir())[0]
        data = bytearray(blob.read_bytes())
        data[-1] ^= 1
        blob.write_bytes(bytes(data))

    @staticmethod
    def drop_compat(out):
        OciTests.rewrite_manifest(out, lambda m: m.update(annotations={}))

    @staticmethod
    def stray_blob(out):
        (out / "blobs" / "sha256" / ("0" * 64)).write_bytes(b"stale")


if __name__ == "__main__":
    unittest.main()
