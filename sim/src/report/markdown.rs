//! The Markdown summary: one section per scenario, and the table of all of them
//! with the definitions of every figure.

use crate::verdict::percent;
use crate::RunReport;

/// How every figure is defined, stated once at the top of the summary.
pub const DEFINITIONS: &str = "\
Definitions (per key, against ideal token buckets with the rule's rate and burst, \
the same maths as the store's script; a window rule against its exact truth instead, \
see the last item; the harness runs on one thread and one \
monotonic clock, so arrival and decision orders are exact):

- **admitted/limit**: admitted requests ÷ the limit's allowance, over the steady \
part (after the warmup). The allowance is what an ideal limiter fed the same \
arrivals admits: rate × time for a key offered above its limit (every scenario \
at 3×), the offered count for a key under it.
- **wrongly limited**: rejected (429 or 503) while the key was under its limit over \
the window: an ideal bucket fed every arrival of the key admits this request, and \
admitted every arrival of the key from one rule period before this request's \
arrival until its decision. (A key above its limit is not judged request by \
request; how much of it gets through is admitted/limit.)
- **wrongly allowed**: admitted although the key had used its allowance: an ideal \
bucket replayed over the admitted requests, in decision order and at each \
decision's instant (full from the arrival of the first admitted request), held less than the \
request's cost: for some window ending there, admissions exceeded burst + rate × \
window. The store decided somewhere between arrival and decision, so for a request \
that waited w, a full replay may hold up to burst + rate × w. Each excess admission \
counts once.
- **held back** (diagnostic, no target): rejections while that replay of the \
admissions still held a whole token, i.e. unspent allowance sat in leases or \
pools elsewhere in the fleet.
- **Redis calls per 1,000 requests**: the lease script's calls, `INFO \
commandstats` (evalsha) on every Redis node, after minus before the run, per \
1,000 requests offered. The agents' other scripts (heartbeats, the \
false-limit SLI's peeks) go as eval and are left out.
- **lease sizes**: tokens per grant as the gateways received them (after the \
agent's node pool took its share).
- **window rules**: the ideal and the replay above are, for a `fixed_window` rule, \
exact fixed windows aligned to the Unix epoch (as the store's are), and for a \
`sliding_window` rule the exact sliding log (every admission's time kept; at most \
`requests` within any `per`), which the store's two-counter window approximates; \
both count by the decision's instant (a fixed-window admission decided just after \
a window's start may count in the window of its arrival).
";

/// A row of a scenario's table: the figure and its value.
type Row = (&'static str, String);

/// One scenario's section.
pub fn scenario(r: &RunReport) -> String {
    let mut out = format!("## {}{}\n\n", r.name, if r.short { " (short)" } else { "" });
    if !r.description.is_empty() {
        out.push_str(&format!("{}\n\n", r.description.trim()));
    }
    out.push_str("| figure | value |\n|---|---|\n");
    let rows = load_rows(r)
        .into_iter()
        .chain(accuracy_rows(r))
        .chain(cost_rows(r));
    for (figure, value) in rows {
        out.push_str(&format!("| {figure} | {value} |\n"));
    }
    out.push_str("\nTargets (docs/performance/accuracy.md, Targets):\n\n");
    for c in &r.checks {
        let mark = if c.pass { "pass" } else { "**MISS**" };
        out.push_str(&format!("- {mark}: {}: {}\n", c.what, c.value));
    }
    out.push('\n');
    out
}

/// How the run was set up and what was offered.
fn load_rows(r: &RunReport) -> Vec<Row> {
    let (f, t, s) = (&r.figures, &r.figures.totals, &r.setup);
    let mut rows = vec![
        (
            "setup",
            format!(
                "{} gateways over {} agents, {}; agent flags `{}`; filter lease timeout {} ms; {:.0} s, steady after {:.0} s (ran {:.1} s)",
                s.gateways, s.agents, s.store, s.agent_args.join(" "), s.filter_timeout_ms,
                s.duration, s.warmup, s.elapsed
            ),
        ),
        (
            "requests",
            format!(
                "{} ({:.0}/s): admitted {}, limited {}, 503 {}, by failure policy {} allowed / {} limited; decided locally {:.1}%",
                t.requests, t.requests as f64 / s.duration.max(1e-9), t.admitted, t.limited,
                t.unavailable, t.failed_allowed, t.failed_limited, f.fraction(t.local) * 100.0
            ),
        ),
    ];
    if s.unmatched > 0 {
        rows.push(("requests no rule applied to", s.unmatched.to_string()));
    }
    rows
}

/// admitted/limit and the wrong decisions.
fn accuracy_rows(r: &RunReport) -> Vec<Row> {
    let (f, t, st) = (&r.figures, &r.figures.totals, &r.figures.steady);
    let steady_share = |n: u64| percent(n as f64 / st.requests.max(1) as f64);
    let wrong = |all: u64, steady: u64| {
        let whole = percent(f.fraction(all));
        format!(
            "{all} ({whole}); steady part {steady} ({})",
            steady_share(steady)
        )
    };
    let rejected = (t.limited + t.unavailable + t.failed_limited).max(1);
    vec![
        (
            "admitted/limit (steady)",
            format!(
                "**{:.4}** ({:.1}/s against {:.1}/s); worst second {:+.1}% / {:+.1}%",
                st.ratio,
                st.admitted_per_sec,
                st.limit_per_sec,
                st.max_over * 100.0,
                -st.max_under * 100.0
            ),
        ),
        (
            "wrongly limited",
            format!(
                "{}; by the gateway's cached denial {} (steady {}), by an agent's answer {} (steady {})",
                wrong(t.wrongly_limited, st.wrongly_limited),
                t.wrongly_limited_cached,
                st.wrongly_limited_cached,
                t.wrongly_limited - t.wrongly_limited_cached,
                st.wrongly_limited - st.wrongly_limited_cached
            ),
        ),
        ("false-limit SLI (agents)", false_limit_sli(r)),
        (
            "wrongly allowed",
            wrong(t.wrongly_allowed, st.wrongly_allowed),
        ),
        (
            "held back (diagnostic)",
            format!(
                "{} ({:.1}% of rejections)",
                t.held_back,
                t.held_back as f64 * 100.0 / rejected as f64
            ),
        ),
    ]
}

/// The agents' false-limit SLI beside the judge's truth, both as shares of
/// the 429s: the SLI is a lower bound (docs/guide/false-limits.md).
fn false_limit_sli(r: &RunReport) -> String {
    let (t, sli) = (&r.figures.totals, &r.setup.false_limits);
    let truth = t.wrongly_limited as f64 / t.limited.max(1) as f64;
    format!(
        "**{}** ({} of {} 429s weighed; {} false of {} checked, {} not checked); the judge: {} of {} 429s wrongly limited (**{}**)",
        percent(sli.ratio()),
        sli.weighed_false,
        sli.weighed,
        sli.false_limits,
        sli.checked,
        sli.skipped,
        t.wrongly_limited,
        t.limited,
        percent(truth)
    )
}

/// What the decisions cost: agent calls, Redis calls, leases, denials, tokens.
fn cost_rows(r: &RunReport) -> Vec<Row> {
    let (f, s) = (&r.figures, &r.setup);
    let (l, d, k) = (&f.leases, &f.denial_ms, &s.tokens);
    vec![
        (
            "agent calls",
            format!(
                "{} ({:.1} per 1,000 requests, {:.1} in the steady part; refills ahead of need {:.1}, requests that waited on their key's call {:.1}, per 1,000); failed: {} timeouts, {} transport, {} status, {} body",
                f.agent_calls, f.per_1000(f.agent_calls), f.steady_calls_per_1000(), f.per_1000(f.refills), f.per_1000(f.waits),
                s.failures[0], s.failures[1], s.failures[2], s.failures[3]
            ) + &if f.cold_starts > 0 {
                format!("; cold starts {} ({} unpaid: denied or unanswered)", f.cold_starts, f.cold_starts_unpaid)
            } else {
                String::new()
            },
        ),
        (
            "harness lag (its own cost)",
            format!(
                "arrivals offered after their planned time by p50 {} µs, p99 {} µs, max {} µs",
                f.harness_lag_us.p50, f.harness_lag_us.p99, f.harness_lag_us.max
            ),
        ),
        (
            "Redis lease-script calls",
            format!(
                "{} (**{:.2} per 1,000 requests**, {:.1}/s); busiest node {:.1}/s, all nodes {:.1}/s in the steady part",
                f.script_calls, f.per_1000(f.script_calls),
                f.script_calls as f64 / s.duration.max(1e-9), f.hottest_node_scripts_per_sec,
                f.steady_scripts_per_sec
            ),
        ),
        (
            "lease sizes (tokens per grant)",
            format!(
                "mean {:.1}, p50 {}, p90 {}, p99 {}, max {} over {} grants",
                l.mean, l.p50, l.p90, l.p99, l.max, l.count
            ),
        ),
        (
            "denials from the agents (retry after, ms)",
            format!(
                "{} denials: mean {:.1}, p50 {}, p90 {}, max {}; {} of them from a node's cached denial or hold (no store call)",
                d.count, d.mean, d.p50, d.p90, d.max, s.denied_at_nodes
            ),
        ),
        (
            "token flow (whole run)",
            format!(
                "{} tokens granted to gateways, {} admitted by the limiter ({} unspent at gateways); {} dropped unspent in agent pools",
                k.to_gateways, k.admitted, k.to_gateways.saturating_sub(k.admitted),
                k.dropped_at_agents
            ),
        ),
    ]
}

/// The table of every scenario run.
pub fn table(reports: &[RunReport]) -> String {
    let mut out = String::from(
        "| scenario | admitted/limit | wrongly limited | wrongly allowed | held back | Redis calls / 1,000 req | busiest Redis node, scripts/s | agent calls / 1,000 req (steady part) | lease p50 / max | targets |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        let f = &r.figures;
        let t = &f.totals;
        let rejected = (t.limited + t.unavailable + t.failed_limited).max(1);
        let targets = if r.passed() { "pass" } else { "**MISS**" };
        out.push_str(&format!(
            "| {} | {:.4} | {} | {} | {:.1}% | {:.2} | {:.0} | {:.1} ({:.1}) | {} / {} | {} |\n",
            r.name,
            f.steady.ratio,
            percent(f.fraction(t.wrongly_limited)),
            percent(f.fraction(t.wrongly_allowed)),
            t.held_back as f64 * 100.0 / rejected as f64,
            f.per_1000(f.script_calls),
            f.hottest_node_scripts_per_sec,
            f.per_1000(f.agent_calls),
            f.steady_calls_per_1000(),
            f.leases.p50,
            f.leases.max,
            targets
        ));
    }
    out
}
