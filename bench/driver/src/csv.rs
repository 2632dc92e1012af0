//! The raw figures, one per line: `phase,scenario,round,metric,value`.

use std::fmt::Write;

use crate::records::{Latency, Results};

/// An open-loop run's figures, by metric name.
fn latency_figures(l: &Latency) -> [(&'static str, f64); 12] {
    [
        ("rate", l.rate),
        ("p50_us", l.p50),
        ("p99_us", l.p99),
        ("p999_us", l.p999),
        ("max_us", l.max),
        ("admitted_p50_us", l.admitted_p50),
        ("admitted_p99_us", l.admitted_p99),
        ("admitted_p999_us", l.admitted_p999),
        ("completed", l.completed as f64),
        ("issued", l.issued as f64),
        ("errors", l.errors as f64),
        ("non_2xx", l.non_2xx as f64),
    ]
}

pub fn render(r: &Results) -> String {
    let mut out = String::from("phase,scenario,round,metric,value\n");
    let mut row = |phase: &str, scenario: &str, round: usize, metric: &str, value: f64| {
        let _ = writeln!(out, "{phase},{scenario},{round},{metric},{value}");
    };
    for t in &r.throughput {
        let (s, n) = (t.scenario, t.round);
        row("throughput", s, n, "rps", t.wrk.rps);
        row("throughput", s, n, "admitted_rps", t.wrk.admitted_rps());
        row("throughput", s, n, "requests", t.wrk.requests as f64);
        row("throughput", s, n, "seconds", t.wrk.seconds);
        row("throughput", s, n, "non_2xx", t.wrk.non_2xx as f64);
        row(
            "throughput",
            s,
            n,
            "socket_errors",
            t.wrk.socket_errors as f64,
        );
        row("throughput", s, n, "envoy_cpu_s", t.envoy_cpu_s);
        if let Some(a) = t.agent_cpu_s {
            row("throughput", s, n, "agent_cpu_s", a);
        }
        if let Some((scripts, total)) = t.redis {
            row("throughput", s, n, "redis_script_calls", scripts as f64);
            row("throughput", s, n, "redis_commands", total as f64);
        }
        for (name, count) in &t.decisions {
            row(
                "throughput",
                s,
                n,
                &format!("decisions.{name}"),
                *count as f64,
            );
        }
    }
    for l in &r.latency {
        for (metric, value) in latency_figures(l) {
            row("latency", l.scenario, l.round, metric, value);
        }
    }
    for p in &r.path {
        let (s, n) = (p.latency.scenario, p.latency.round);
        for (metric, value) in latency_figures(&p.latency) {
            row("request_path", s, n, metric, value);
        }
        row("request_path", s, n, "envoy_cpu_s", p.envoy_cpu_s);
        row("request_path", s, n, "seconds", p.wall_s);
        if let Some((scripts, total)) = p.redis {
            row("request_path", s, n, "redis_script_calls", scripts as f64);
            row("request_path", s, n, "redis_commands", total as f64);
        }
        if let Some(items) = p.agent_leases {
            row("request_path", s, n, "agent_lease_items", items as f64);
        }
        let lease = [
            ("lease_calls", p.lease.calls),
            ("lease_refills", p.lease.refills),
            ("lease_waits", p.lease.waits),
            ("lease_waits_measured", p.measured_lease.waits),
        ];
        for (name, value) in lease {
            if let Some(v) = value {
                row("request_path", s, n, name, v as f64);
            }
        }
        for (name, count) in &p.decisions {
            row(
                "request_path",
                s,
                n,
                &format!("decisions.{name}"),
                *count as f64,
            );
        }
    }
    for x in &r.scale {
        let (s, n) = (format!("rules-{}", x.rules), x.round);
        let mut put = |metric: &str, value: f64| row("rules_at_scale", &s, n, metric, value);
        for (to, load) in [("", &x.matched), ("no_rule_", &x.unmatched)] {
            put(&format!("{to}rps"), load.wrk.rps);
            put(&format!("{to}admitted_rps"), load.admitted_rps());
            put(&format!("{to}requests"), load.wrk.requests as f64);
            put(&format!("{to}envoy_cpu_s"), load.envoy_cpu_s);
        }
        if let Some(kib) = x.rss_kib {
            put("envoy_rss_kib", kib as f64);
        }
        if let Some(kib) = x.agent_rss_kib {
            put("agent_rss_kib", kib as f64);
        }
        put("open_loop_rate", x.steady.rate);
        put("steady_p99_us", x.steady.p99);
        put("reload_p99_us", x.reload.p99);
        put("reload_max_us", x.reload.max);
        put(
            "reload_non_2xx",
            (x.reload.non_2xx + x.reload.errors) as f64,
        );
        let p = &x.propagation;
        put("reload_vms", p.vms as f64);
        put("reload_vms_reached", p.reached as f64);
        put("reload_reached_every_vm", f64::from(u8::from(p.every_vm())));
        if let Some(seconds) = p.seconds {
            put("propagation_s", seconds);
        }
    }
    for m in &r.micro {
        row("micro", &m.name, 0, "median_ns", m.median_ns);
        row("micro", &m.name, 0, "lower_ns", m.lower_ns);
        row("micro", &m.name, 0, "upper_ns", m.upper_ns);
    }
    out
}
