"""Tests of tools/capacity.py: its constants are the code's, its parser reads
the simulator's report, and its cost functions keep their promises."""

import importlib.util
import re
import sys
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("capacity", ROOT / "tools" / "capacity.py")
capacity = importlib.util.module_from_spec(spec)
sys.modules["capacity"] = capacity  # dataclasses look their module up
spec.loader.exec_module(capacity)

REPORT = """\
| setup | 10000 gateways over 100 agents, virtual store, seed 1; faults: ; agent flags ``; filter lease timeout 1000 ms; 60 s, steady after 10 s (ran 29.2 s) |
| requests | 2401173 (40020/s): admitted 974941, limited 1426232 |
| agent calls | 2133266 (888.4 per 1,000 requests, 885.9 in the steady part; refills ahead of need 0.1, requests that waited on their key's call 0.1, per 1,000); failed: 0 timeouts |
| Redis lease-script calls | 670405 (**279.20 per 1,000 requests**, 11173.4/s); busiest node 2640.3/s, all nodes 10558.4/s in the steady part |
| denials from the agents (retry after, ms) | 1158261 denials: mean 392.5, p50 333, p90 721, max 1000; 0 of them |
"""


def const(path, pattern):
    text = (ROOT / path).read_text()
    m = re.search(pattern, text)
    if not m:
        raise AssertionError(f"{path}: no match for {pattern}")
    return float(m.group(1).replace("_", ""))


class Constants(unittest.TestCase):
    def test_the_model_uses_the_codes_defaults(self):
        self.assertEqual(
            capacity.THICK_TOKENS_PER_LIFE,
            const("core/src/lease.rs", r"THICK_TOKENS_PER_LIFE: f64 = ([0-9.]+);"),
        )
        self.assertEqual(
            capacity.FAR_OVER_SHARE,
            const("core/src/policy.rs", r"FAR_OVER_SHARE: f64 = ([0-9.]+);"),
        )
        self.assertEqual(
            capacity.LEASE_TTL_S * 1000,
            const("core/src/policy.rs", r"DEFAULT_LEASE_TTL_MS: u64 = ([0-9_]+);"),
        )
        self.assertEqual(
            capacity.MAX_KEYS,
            const("store/src/memory.rs", r"DEFAULT_MAX_KEYS: u32 = ([0-9_]+);"),
        )
        self.assertEqual(
            capacity.AGENT_BYTES_PER_KEY,
            const("agent/tests/memory_bounds.rs", r"PER_KEY_BYTES: u64 = ([0-9_]+);"),
        )


class Report(unittest.TestCase):
    def test_the_simulators_report_is_read(self):
        got = capacity.parse_report(REPORT)
        self.assertEqual(got["gateways"], 10000)
        self.assertEqual(got["agents"], 100)
        self.assertEqual(got["agent_calls_per_1000"], 885.9)
        self.assertEqual(got["store_calls_per_s"], 10558.4)
        self.assertAlmostEqual(got["retry_s"], 0.3925)

    def test_a_report_without_a_figure_is_an_error(self):
        with self.assertRaises(ValueError):
            capacity.parse_report(REPORT.replace("all nodes", "every node"))


class Costs(unittest.TestCase):
    p = capacity.Protocol(store_calls_thick=8.0, store_calls_far=12.0, retry_s=0.4)

    def test_under_its_share_a_holder_calls_for_every_request(self):
        for rate in (0.01, 1.0, 13.0):
            self.assertEqual(capacity.with_denials(rate, rate * 2, 0.4), rate)

    def test_over_its_share_denials_cached_save_calls_but_never_the_admitted(self):
        calls = capacity.with_denials(10.0, 2.0, 0.4)
        self.assertGreater(calls, 2.0)
        self.assertLess(calls, 10.0)

    def test_a_thick_node_calls_a_fixed_rate_whatever_its_demand(self):
        self.assertEqual(capacity.store_calls(50.0, 1000.0, self.p), 8.0)
        self.assertEqual(capacity.store_calls(1500.0, 1000.0, self.p), 8.0)
        self.assertEqual(capacity.store_calls(50.0, 10.0, self.p), 12.0)

    def test_a_thin_node_calls_per_request(self):
        self.assertEqual(capacity.store_calls(5.0, 100.0, self.p), 5.0)

    def test_regions_split_the_load_and_the_limit(self):
        fleet = capacity.Fleet(1e6, 10_000, 100, regions=1)
        mix = capacity.cold_keys()(1e6)
        one = capacity.predict(fleet, mix, self.p)
        fleet.regions = 5
        five = capacity.predict(fleet, mix, self.p)
        self.assertAlmostEqual(five["store_calls"] * 5, one["store_calls"], delta=1.0)


if __name__ == "__main__":
    unittest.main()
