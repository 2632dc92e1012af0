//! The agent and Redis per-request costs, and the criterion micro-benchmarks.

use std::fmt::Write;

use super::{fmt_spread, label, verdict};
use crate::number::fmt_num;
use crate::records::{Results, Throughput};

pub fn agent(r: &Results) -> String {
    let mut out = String::from(
        "| configuration | agent CPU s per 1M requests | Envoy CPU s per 1M requests | agent ÷ Envoy | target | | Redis script calls per 1,000 requests | per second | all Redis commands per 1,000 requests | target (scripts) | |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for id in ["c", "d", "c3"] {
        let per_million = |t: &Throughput, s: f64| s / t.wrk.requests.max(1) as f64 * 1e6;
        let agent_cpu = r.spread(id, |t| t.agent_cpu_s.map(|s| per_million(t, s)));
        let envoy_cpu = r.spread(id, |t| Some(per_million(t, t.envoy_cpu_s)));
        let share = r.spread(id, |t| t.agent_cpu_s.map(|s| s / t.envoy_cpu_s * 100.0));
        let (cpu_target, cpu_ok) = match id {
            "c" | "c3" => ("≤ 1%", share.map(|s| s.median <= 1.0)),
            _ => ("— (every request is a miss)", None),
        };
        let scripts = r.spread(id, |t| {
            t.redis
                .map(|(s, _)| s as f64 / t.wrk.requests.max(1) as f64 * 1e3)
        });
        let per_sec = r.spread(id, |t| t.redis.map(|(s, _)| s as f64 / t.wrk.seconds));
        let all = r.spread(id, |t| {
            t.redis
                .map(|(_, n)| n as f64 / t.wrk.requests.max(1) as f64 * 1e3)
        });
        let (redis_target, redis_ok) = match id {
            "c" | "c3" => (
                "≤ 10 per second (1 agent ÷ 100 ms leases)",
                per_sec.map(|s| s.median <= 10.0),
            ),
            _ => ("— (one per request: exact rule)", None),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {}% | {cpu_target} | {} | {} | {} | {} | {redis_target} | {} |",
            label(id),
            fmt_spread(agent_cpu, 2),
            fmt_spread(envoy_cpu, 2),
            fmt_spread(share, 2),
            verdict(cpu_ok),
            fmt_spread(scripts, 3),
            fmt_spread(per_sec, 1),
            fmt_spread(all, 3),
            if per_sec.is_some() {
                verdict(redis_ok)
            } else {
                "n/a"
            },
        );
    }
    out
}

pub fn micro(r: &Results) -> String {
    if r.micro.is_empty() {
        return "Not run.\n".into();
    }
    let mut out = String::from(
        "| benchmark | median ns [95% CI] | ÷ governor | target | |\n|---|---|---|---|---|\n",
    );
    for m in &r.micro {
        let base = match m.name.as_str() {
            "keyed/meshlimit" => r.micro("keyed/governor"),
            "single/meshlimit" => r.micro("single/governor"),
            _ => None,
        };
        let ratio = base.map(|b| m.median_ns / b.median_ns);
        let (target, ok) = match base {
            Some(_) => ("≤ 1.0×", ratio.map(|x| x <= 1.0)),
            None => ("", None),
        };
        let _ = writeln!(
            out,
            "| `{}` | {} [{}–{}] | {} | {target} | {} |",
            m.name,
            fmt_num(m.median_ns, 1),
            fmt_num(m.lower_ns, 1),
            fmt_num(m.upper_ns, 1),
            ratio.map_or(String::new(), |x| format!("{x:.2}×")),
            if base.is_some() { verdict(ok) } else { "" },
        );
    }
    out
}
