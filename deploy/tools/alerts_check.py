#!/usr/bin/env python3
"""Every alert of the PrometheusRule has a runbook and is tested both ways.

    alerts_check.py --rules deploy/monitoring/prometheusrule.yaml \
        --tests deploy/monitoring/tests.yaml --runbooks docs/runbooks

Fails when an alert has no `runbook_url` annotation, when that URL does not end
in the name of a file in the runbooks folder, or when monitoring/tests.yaml has
no promtool case where the alert fires (non-empty exp_alerts) and one where it
stays silent (empty exp_alerts). promtool itself checks that the cases hold.
"""

import argparse
import pathlib
import sys

import yaml


def alerts(rule_doc):
    spec = rule_doc.get("spec", rule_doc)
    for group in spec.get("groups", []):
        for rule in group.get("rules", []):
            if "alert" in rule:
                yield rule


def problems(rule_doc, tests_doc, runbooks):
    found = []
    fires, silent = set(), set()
    for case in tests_doc.get("tests", []):
        for t in case.get("alert_rule_test", []) or []:
            (fires if t.get("exp_alerts") else silent).add(t.get("alertname"))
    names = set()
    for rule in alerts(rule_doc):
        name = rule["alert"]
        names.add(name)
        url = (rule.get("annotations") or {}).get("runbook_url", "")
        if not url:
            found.append(f"{name}: no runbook_url annotation")
        elif not (runbooks / url.rsplit("/", 1)[-1]).is_file():
            found.append(f"{name}: runbook_url {url} names no file in {runbooks}")
        if name not in fires:
            found.append(f"{name}: no promtool test where it fires")
        if name not in silent:
            found.append(f"{name}: no promtool test where it stays silent")
    for name in sorted((fires | silent) - names):
        found.append(f"{name}: tested but not an alert of the PrometheusRule")
    if not names:
        found.append("no alerts found")
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", required=True, type=pathlib.Path)
    ap.add_argument("--tests", required=True, type=pathlib.Path)
    ap.add_argument("--runbooks", required=True, type=pathlib.Path)
    args = ap.parse_args()
    rule_doc = yaml.safe_load(args.rules.read_text())
    found = problems(rule_doc, yaml.safe_load(args.tests.read_text()), args.runbooks)
    for p in found:
        print(f"FAIL alerts: {p}")
    if found:
        return 1
    n = len(list(alerts(rule_doc)))
    print(f"ok   {n} alerts: each has a runbook in {args.runbooks} and promtool tests that fire and stay silent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
