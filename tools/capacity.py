#!/usr/bin/env python3
"""The capacity model: what a fleet needs, from costs measured here.

    python3 tools/capacity.py                 # the tables for 1M and 10M checks/s
    python3 tools/capacity.py --rate 250000 --regions 2 --per-gateway 500
    python3 tools/capacity.py check           # the model beside the simulator

The model works key by key. A key offered r requests a second with a limit
of L is spread over G gateways (Envoy worker VMs) and N agents. At one
gateway it sees g = r / G, at one node n = r / N, and its share of the limit
at a node is L / N. The lease protocol's own thresholds decide what each
costs (docs/design/lease-protocol.md):

- A holder is thick when a lease life (TTL, 300 ms) of its demand holds at
  least 4 tokens (THICK_TOKENS_PER_LIFE in core/src/lease.rs), thin below.
- A thin gateway calls its agent for every request, but those a cached
  denial answers; a thin node calls the store for every item likewise.
- A thick gateway asks about once per half a lease life (2 / TTL a second),
  and over its share once more each time a denial's retry ends.
- A thick node calls the store a fixed number of times a second per key,
  whatever its demand: `store_calls_thick` under twice its share,
  `store_calls_far` when far over it. Both are measured by the simulator
  on one key (`check --calibrate`), and the denial's retry time `retry_s`
  with them.
- A request a cached denial answers costs no call: after a denial, the
  holder answers its key's requests locally for `retry_s`.

Redis, agents and bytes follow from those call rates and the measured costs
in bench/results/ (capacity-inputs.json: Redis work per CPU second, bytes
per item and per bucket, filter memory; latest.csv: agent CPU per lease
call; capacity-protocol.json: the three protocol figures).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import resource
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

# The lease protocol's defaults (docs/design/lease-protocol.md, Tunables).
LEASE_TTL_S = 0.3  # --lease-ttl-ms
THICK_TOKENS_PER_LIFE = 4  # core/src/lease.rs
FAR_OVER_SHARE = 2  # core/src/policy.rs
MAX_KEYS = 25_000  # --max-keys, per table
AGENT_BYTES_PER_KEY = 1_300  # agent/tests: each table about 1.3 KiB a key at worst
AGENT_TABLES = 2  # the node pool and the fail-local buckets
IDLE_SWEEP_S = 2.0  # an entry idles out within about 2 s of its key's last ask
REGION_EXCHANGE_PER_S = 1  # a leader reads each peer region's sealed demand once a period
REDIS_TARGET_UTILISATION = 0.5  # size Redis for twice the load, as for any shard

# The fleet's shape when only a rate is given: a sidecar mesh, 100 checks a
# second per Envoy worker and 100 workers per node.
PER_GATEWAY = 100.0
GATEWAYS_PER_NODE = 100


@dataclass
class Protocol:
    store_calls_thick: float
    store_calls_far: float
    retry_s: float


@dataclass
class Mix:
    """Keys of one rule: `weights` are their shares of the traffic."""

    name: str
    keys: int
    limit: float  # requests a second per key (burst = limit)
    refill_s: float  # the time the burst takes to refill
    weights: object  # callable(rate) -> iterable of (count, per-key rate)
    # `scope: global` (a customer's quota across regions) or `region` (the
    # default: each region enforces the whole limit, as per-IP limits do).
    global_scope: bool = True


def hot_keys(keys=8, over=2.5):
    def per_key(rate):
        return [(keys, rate / keys)]

    return lambda rate: Mix(
        "a few hot keys", keys, rate / keys / over, 1.0, per_key
    )


def zipf_keys(keys=1_000_000, s=1.1, limit=100.0):
    def per_key(rate):
        h = sum(k**-s for k in range(1, keys + 1))
        return [(1, rate * k**-s / h) for k in range(1, keys + 1)]

    return lambda rate: Mix(f"zipf over {keys:,} keys", keys, limit, 1.0, per_key)


def cold_keys(seen_every_s=20.0, limit_per_min=60.0, keys=None):
    def mix(rate):
        n = keys or int(rate * seen_every_s)
        return Mix(
            "cold keys (per IP)",
            n,
            limit_per_min / 60.0,
            60.0,
            lambda r: [(n, r / n)],
            global_scope=False,
        )

    return mix


MIXES = {"hot": hot_keys(), "zipf": zipf_keys(), "cold": cold_keys()}


def with_denials(rate, share, retry_s):
    """Calls a second from a holder offered `rate` with `share` admitted:
    every admitted request calls; after a denial, the holder answers its
    requests locally for `retry_s`, so of the denied only one in
    (1 + denied rate × retry_s) calls."""
    if rate <= share:
        return rate
    denied = rate - share
    return share + denied / (1.0 + denied * retry_s)


def thick(rate):
    return rate * LEASE_TTL_S >= THICK_TOKENS_PER_LIFE


def agent_calls(g, share, p):
    """Agent calls a second from one gateway for one key."""
    if thick(g):
        # A want of half a lease life, and over its share one more call each
        # time a denial's retry ends.
        polls = 1.0 / p.retry_s if g > share else 0.0
        return min(g, 2.0 / LEASE_TTL_S + polls)
    return with_denials(g, share, p.retry_s)


def store_calls(n, share, p):
    """Store calls a second from one node for one key."""
    if not thick(n):
        return with_denials(n, share, p.retry_s)
    if n >= FAR_OVER_SHARE * share:
        return min(n, p.store_calls_far)
    return min(n, p.store_calls_thick)


@dataclass
class Fleet:
    rate: float
    gateways: int
    nodes: int
    regions: int = 1
    shards: int | None = None


def predict(fleet: Fleet, mix: Mix, p: Protocol):
    """Per region: agent calls, store calls, live keys at a node and in Redis."""
    r_rate = fleet.rate / fleet.regions
    gw = max(1, fleet.gateways // fleet.regions)
    nodes = max(1, fleet.nodes // fleet.regions)
    # A global rule's share follows demand, which is even here.
    limit = mix.limit / fleet.regions if mix.global_scope else mix.limit
    agent = store = hottest = node_keys = buckets = 0.0
    for count, r in mix.weights(r_rate):
        agent += count * gw * agent_calls(r / gw, limit / gw, p)
        calls = nodes * store_calls(r / nodes, limit / nodes, p)
        store += count * calls
        hottest = max(hottest, calls)
        node_keys += count * (1.0 - math.exp(-(r / nodes) * IDLE_SWEEP_S))
        buckets += count * (1.0 - math.exp(-r * (mix.refill_s + 1.0)))
    return {
        "rate": r_rate,
        "gateways": gw,
        "nodes": nodes,
        "agent_calls": agent,
        "store_calls": store,
        "hottest_key_store_calls": hottest,
        "node_keys": node_keys,
        "buckets": buckets,
    }


def load_inputs():
    inputs = json.loads((RESULTS / "capacity-inputs.json").read_text())
    protocol = json.loads((RESULTS / "capacity-protocol.json").read_text())
    inputs["agent_cpu_s_per_call"] = agent_cpu_per_call(RESULTS / "latest.csv")
    return inputs, Protocol(**{k: protocol[k] for k in Protocol.__dataclass_fields__})


def agent_cpu_per_call(path):
    """Agent CPU per lease call, from `make bench`'s phase (d): every
    request a new key, so one call of one item and one store call each."""
    cpu, requests = {}, {}
    with path.open() as f:
        for row in csv.DictReader(f):
            if row["phase"] == "throughput" and row["scenario"] == "d":
                if row["metric"] == "agent_cpu_s":
                    cpu[row["round"]] = float(row["value"])
                elif row["metric"] == "requests":
                    requests[row["round"]] = float(row["value"])
    per = [cpu[r] / requests[r] for r in cpu if requests.get(r)]
    return statistics.median(per)


def size(fleet: Fleet, mix: Mix, p: Protocol, inputs):
    f = predict(fleet, mix, p)
    items_per_cpu = inputs["redis_items_per_cpu_second"]["batch16"]
    hot_per_cpu = inputs["redis_items_per_cpu_second"]["hot"]
    need = f["store_calls"] / (items_per_cpu * REDIS_TARGET_UTILISATION)
    shards = fleet.shards or max(1, math.ceil(need))
    bpi = inputs["redis_bytes_per_item"]
    bucket = inputs["redis_bytes_per_bucket"]["token_bucket"]
    per_node_calls = f["agent_calls"] / f["nodes"]
    node_keys = min(f["node_keys"], MAX_KEYS)
    exchanged = fleet.regions > 1 and mix.global_scope
    global_keys = f["buckets"] if exchanged else 0.0
    # Each agent flushes the demand of the global keys it saw to its region.
    flushed_keys = f["node_keys"] * f["nodes"] if exchanged else 0.0
    return {
        "primaries": shards,
        "store_calls_per_shard": f["store_calls"] / shards,
        "hottest_key_cpu": f["hottest_key_store_calls"] / hot_per_cpu,
        "agent_calls_per_1000": 1000.0 * f["agent_calls"] / f["rate"],
        "agents": f["nodes"],
        "agent_cores": per_node_calls * inputs["agent_cpu_s_per_call"],
        "agent_redis_mbit": (
            f["store_calls"] * (bpi["in"] + bpi["out"])
            + flushed_keys * inputs["region_bytes_per_key"] * inputs["region_messages_per_second"]
        )
        * 8
        / 1e6,
        "region_mbit": global_keys
        * inputs["region_bytes_per_key"]
        * (fleet.regions - 1)
        * REGION_EXCHANGE_PER_S
        * 8
        / 1e6,
        "agent_key_mib": node_keys * AGENT_BYTES_PER_KEY * AGENT_TABLES / 2**20,
        "shard_mib": f["buckets"] * bucket / shards / 2**20,
    }


def fleet_for(rate, regions, per_gateway, gateways_per_node):
    gateways = max(1, round(rate / per_gateway))
    return Fleet(rate, gateways, max(1, gateways // gateways_per_node), regions)


COLUMNS = [
    ("primaries", "Redis primaries a region", "{:,.0f}"),
    ("store_calls_per_shard", "store calls/s a shard", "{:,.0f}"),
    ("hottest_key_cpu", "hottest key, shard cores", "{:.2f}"),
    ("agent_calls_per_1000", "agent calls per 1,000", "{:,.0f}"),
    ("agents", "agents a region", "{:,.0f}"),
    ("agent_cores", "cores an agent", "{:.2f}"),
    ("agent_redis_mbit", "agents↔Redis Mbit/s a region", "{:,.0f}"),
    ("region_mbit", "between regions Mbit/s a region", "{:,.1f}"),
    ("agent_key_mib", "key memory an agent MiB", "{:,.0f}"),
    ("shard_mib", "bucket memory a shard MiB", "{:,.0f}"),
]


def tables(args):
    inputs, p = load_inputs()
    out = [
        "| checks/s | regions | mix | " + " | ".join(c[1] for c in COLUMNS) + " |",
        "|---" * (len(COLUMNS) + 3) + "|",
    ]
    for rate in args.rate:
        for regions in args.regions:
            fleet = fleet_for(rate, regions, args.per_gateway, args.gateways_per_node)
            for key in args.mix:
                mix = MIXES[key](rate)
                row = size(fleet, mix, p, inputs)
                cells = [fmt.format(row[k]) for k, _, fmt in COLUMNS]
                out.append(f"| {rate:,.0f} | {regions} | {mix.name} | " + " | ".join(cells) + " |")
    print(
        f"Fleet: {args.per_gateway:,.0f} checks/s an Envoy worker, "
        f"{args.gateways_per_node} workers a node; traffic and global limits "
        "split evenly over the regions.\n"
    )
    print("\n".join(out))


# ---- the model beside the simulator

CHECKS = {
    "hot": ("scenarios/capacity/hot-keys.yaml", lambda: hot_keys()(40_000)),
    "zipf": ("scenarios/capacity/zipf-keys.yaml", lambda: zipf_keys()(50_000)),
    "cold": (
        "scenarios/capacity/cold-keys.yaml",
        lambda: cold_keys(keys=1_000_000)(50_000),
    ),
}
CALIBRATE = {
    "store_calls_far": "scenarios/capacity/one-key-far-over.yaml",
    "store_calls_thick": "scenarios/capacity/one-key-under.yaml",
}
SIM = ROOT / "target" / "release" / "meshlimit-sim"


NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"


def parse_report(text):
    """The figures the check compares, from `meshlimit-sim virtual`'s report."""

    def grab(pattern):
        m = re.search(pattern, text)
        if not m:
            raise ValueError(f"no match for {pattern!r} in the simulator's report")
        return [float(x.replace(",", "")) for x in m.groups()]

    (gateways, agents) = grab(r"\| setup \| (\d+) gateways over (\d+) agents")
    (agent_steady,) = grab(r"per 1,000 requests, " + NUM + r" in the steady part")
    (store_steady,) = grab(r"all nodes " + NUM + r"/s in the steady part")
    (retry_ms,) = grab(r"retry after, ms\) \| \d+ denials: mean " + NUM)
    return {
        "gateways": gateways,
        "agents": agents,
        "agent_calls_per_1000": agent_steady,
        "store_calls_per_s": store_steady,
        "retry_s": retry_ms / 1000.0,
    }


def run_sim(scenario):
    """One run of `scenario` in virtual time: its figures and CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [str(SIM), "virtual", scenario],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return parse_report(proc.stdout), cpu


def calibrate():
    far, _ = run_sim(CALIBRATE["store_calls_far"])
    under, _ = run_sim(CALIBRATE["store_calls_thick"])
    protocol = {
        "store_calls_far": round(far["store_calls_per_s"] / far["agents"], 2),
        "store_calls_thick": round(under["store_calls_per_s"] / under["agents"], 2),
        "retry_s": round(far["retry_s"], 3),
        "command": "make capacity-check",
        "scenarios": list(CALIBRATE.values()),
    }
    (RESULTS / "capacity-protocol.json").write_text(json.dumps(protocol, indent=2) + "\n")
    return Protocol(**{k: protocol[k] for k in Protocol.__dataclass_fields__})


def check(_args):
    p = calibrate()
    rows, worst = [], 0.0
    for key, (scenario, make_mix) in CHECKS.items():
        got, cpu = run_sim(scenario)
        fleet = Fleet(CHECK_RATES[key], int(got["gateways"]), int(got["agents"]))
        mix = make_mix()
        model = predict(fleet, mix, p)
        pairs = [
            (got["agent_calls_per_1000"], 1000.0 * model["agent_calls"] / fleet.rate),
            (got["store_calls_per_s"] / CHECK_SHARDS, model["store_calls"] / CHECK_SHARDS),
        ]
        cells = []
        for sim_v, model_v in pairs:
            diff = (model_v - sim_v) / sim_v if sim_v else 0.0
            worst = max(worst, abs(diff))
            cells += [f"{sim_v:,.1f}", f"{model_v:,.1f}", f"{diff:+.1%}"]
        rows.append(f"| {mix.name} | " + " | ".join(cells) + f" | {cpu:.1f} |")
    text = CHECK_HEADER.format(
        far=p.store_calls_far, thick=p.store_calls_thick, retry=p.retry_s
    ) + "\n".join(rows) + f"\n\nLargest difference: {worst:.1%} (the bound is 20%).\n"
    (RESULTS / "capacity-check.md").write_text(text)
    print(text)
    return 0 if worst <= 0.2 else 1


CHECK_RATES = {"hot": 40_000, "zipf": 50_000, "cold": 50_000}
CHECK_SHARDS = 16
CHECK_HEADER = """# The capacity model beside the simulator

Written by `make capacity-check` (`python3 tools/capacity.py check`): each
scenario of `scenarios/capacity/` run by `meshlimit-sim virtual` (10,000
gateways, 100 agents, 16 store shards, 60 s of virtual time, seed 1), and the
model of `tools/capacity.py` for the same keys, rates and fleet. Figures are
the steady part's. CPU is the simulator's own (user + system), one thread.

The model's protocol figures, measured by the simulator on one key over 1,000
gateways and 10 agents (`bench/results/capacity-protocol.json`): a node far
over its share makes {far:.1f} store calls a second for the key, one under
twice its share {thick:.1f}; a denial's retry averages {retry:.3f} s.

| mix | agent calls per 1,000, sim | model | diff | store calls/s a shard, sim | model | diff | sim CPU s |
|---|---|---|---|---|---|---|---|
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", choices=["tables", "check"], default="tables")
    parser.add_argument("--rate", type=float, nargs="+", default=[1e6, 1e7])
    parser.add_argument("--regions", type=int, nargs="+", default=[1, 3, 5])
    parser.add_argument("--mix", nargs="+", choices=list(MIXES), default=list(MIXES))
    parser.add_argument("--per-gateway", type=float, default=PER_GATEWAY,
                        help="checks a second per Envoy worker")
    parser.add_argument("--gateways-per-node", type=int, default=GATEWAYS_PER_NODE)
    args = parser.parse_args(argv)
    if args.command == "check":
        return check(args)
    tables(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
