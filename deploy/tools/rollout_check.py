"""A rules change reaches a running agent the way Kubernetes delivers it.

    rollout_check.py --agent BIN --rules deploy/rules.yaml

Lays out a ConfigMap volume as the kubelet does (the file is a symlink through
`..data`, itself a symlink to a timestamped directory), starts the agent on it,
then swaps `..data` atomically as the kubelet does on a ConfigMap update, first
to changed rules (the agent must apply them: new version, reloads{result="ok"})
and then to a broken file (it must keep the last good rules, count
reloads{result="error"} and stay ready).
"""

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

from metrics_check import free_port, get, new_secret, secret_env, wait_for


class ConfigMapVolume:
    """The kubelet's atomic-writer layout for one key, `rules.yaml`."""

    def __init__(self, root):
        self.root, self.generation = root, 0

    def publish(self, text):
        self.generation += 1
        data = self.root / f"..2026_01_01_00_00_00.{self.generation:09d}"
        data.mkdir()
        (data / "rules.yaml").write_text(text)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(data.name)
        old = os.readlink(self.root / "..data") if (self.root / "..data").is_symlink() else None
        os.replace(tmp, self.root / "..data")  # the atomic swap
        if not (self.root / "rules.yaml").is_symlink():
            (self.root / "rules.yaml").symlink_to("..data/rules.yaml")
        if old:
            for f in (self.root / old).iterdir():
                f.unlink()
            (self.root / old).rmdir()


def metric(text, name, labels=""):
    """Value of the first sample `name{…labels…}`, or None."""
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if labels in line:
                return float(line.rsplit(" ", 1)[1])
    return None


def version(text):
    m = re.search(r'meshlimit_rules_version_info\{version="([^"]+)"\} 1', text)
    return m.group(1) if m else None


def wait_metrics(url, until, deadline=15.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        text = get(url)[1]
        if until(text):
            return text
        time.sleep(0.25)
    raise SystemExit(f"FAIL no change on {url} within {deadline:.0f} s; last:\n{text}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agent", required=True)
    ap.add_argument("--rules", type=pathlib.Path, required=True)
    args = ap.parse_args()
    good = args.rules.read_text()
    changed = good.replace("limit: { requests: 10, per: 1m, burst: 10 }", "limit: { requests: 20, per: 1m, burst: 20 }")
    if changed == good:
        raise SystemExit("FAIL the demo rule's limit line was not found in the rules to change")
    broken = changed.replace("limit: { requests: 20,", "limit: { requets: 20,", 1)
    with tempfile.TemporaryDirectory() as tmp:
        volume = ConfigMapVolume(pathlib.Path(tmp))
        volume.publish(good)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        agent = subprocess.Popen([args.agent, "run", "--rules", str(volume.root / "rules.yaml"),
                                  "--listen", f"127.0.0.1:{port}", "--store", "memory"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env=secret_env(new_secret(), RUST_LOG="warn"))
        try:
            wait_for(f"{base}/readyz", agent, "meshlimit-agent")
            first = version(get(f"{base}/metrics")[1])
            volume.publish(changed)
            text = wait_metrics(f"{base}/metrics", lambda t: version(t) not in (None, first))
            second = version(text)
            ok = metric(text, "meshlimit_rules_reloads_total", 'result="ok"')
            volume.publish(broken)
            text = wait_metrics(f"{base}/metrics",
                                lambda t: (metric(t, "meshlimit_rules_reloads_total", 'result="error"') or 0) >= 1)
            kept, ready = version(text), get(f"{base}/readyz")[0]
        finally:
            agent.terminate()
            agent.wait(timeout=5)
    if ok != 2 or kept != second or ready != 200:
        print(f"FAIL after the swaps: reloads ok={ok} (want 2), version {kept} (want {second} kept), readyz {ready}")
        return 1
    print(f"ok   ConfigMap-style ..data swap: version {first} -> {second} applied (reloads ok=2); "
          f"a broken file was refused (reloads error>=1), {second} kept, agent still ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
