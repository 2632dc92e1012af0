//! The raw figures, one per line: `phase,scenario,round,metric,value`.

use std::fmt::Write;

use crate::records::Results;

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
        let (s, n) = (l.scenario, l.round);
        row("latency", s, n, "rate", l.rate);
        row("latency", s, n, "p50_us", l.p50);
        row("latency", s, n, "p99_us", l.p99);
        row("latency", s, n, "p999_us", l.p999);
        row("latency", s, n, "max_us", l.max);
        row("latency", s, n, "completed", l.completed as f64);
        row("latency", s, n, "errors", l.errors as f64);
        row("latency", s, n, "non_2xx", l.non_2xx as f64);
    }
    for m in &r.micro {
        row("micro", &m.name, 0, "median_ns", m.median_ns);
        row("micro", &m.name, 0, "lower_ns", m.lower_ns);
        row("micro", &m.name, 0, "upper_ns", m.upper_ns);
    }
    out
}
