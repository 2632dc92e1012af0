//! A rule's limit and its plans compiled, and the periods they are written in
//! (`250ms` … `366d`).

use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroU64};

use super::{check_header_name, MAX_PERIOD_NS, MAX_REFILL_NS};
use crate::limit::Limit;
use crate::rules::config::{Algorithm, LimitConfig, PlansConfig};
use crate::rules::Limits;
use crate::{NANOS_PER_MS, NANOS_PER_SEC};

pub(super) fn compile_plans(
    p: &PlansConfig,
    cost: u32,
    algorithm: Algorithm,
    err: &mut impl FnMut(&str, String),
) -> Option<Limits> {
    let by = match (&p.header, &p.claim, &p.metadata) {
        (Some(h), None, None) => {
            check_header_name(h, "plans.header", err);
            Some(crate::rules::PlanSource::Header(h.to_ascii_lowercase()))
        }
        (None, Some(c), None) => {
            let path = crate::metadata::MetadataPath::claim(c);
            match path.check() {
                Ok(()) => Some(crate::rules::PlanSource::Metadata(path)),
                Err(e) => {
                    err("plans.claim", e.to_string());
                    None
                }
            }
        }
        (None, None, Some(m)) => {
            let path: crate::metadata::MetadataPath = m.clone().into();
            match path.check() {
                Ok(()) => Some(crate::rules::PlanSource::Metadata(path)),
                Err(e) => {
                    err("plans.metadata", e.to_string());
                    None
                }
            }
        }
        _ => {
            err(
                "plans",
                "give exactly one of `header`, `claim` or `metadata`: what names the plan".into(),
            );
            None
        }
    };
    if p.limits.is_empty() {
        err("plans.limits", "at least one plan is required".into());
    }
    let mut limits = BTreeMap::new();
    for (plan, l) in &p.limits {
        if let Some(limit) = compile_limit(l, &format!("plans.limits.{plan}"), cost, algorithm, err)
        {
            limits.insert(plan.clone(), limit);
        }
    }
    if !p.limits.contains_key(&p.default) {
        err(
            "plans.default",
            format!("plan `{}` is not in `plans.limits`", p.default),
        );
    }
    let default = limits.get(&p.default).copied()?;
    let by = by?;
    (limits.len() == p.limits.len()).then(|| Limits::Plans {
        by,
        default_plan: p.default.clone(),
        default,
        limits,
    })
}

pub(super) fn compile_limit(
    l: &LimitConfig,
    field: &str,
    cost: u32,
    algorithm: Algorithm,
    err: &mut impl FnMut(&str, String),
) -> Option<Limit> {
    if let (Some(burst), true) = (l.burst, algorithm.is_window()) {
        err(
            &format!("{field}.burst"),
            format!(
                "`burst: {burst}` applies to `token_bucket` only: a `{}` admits `requests` per `per` window and has no burst: remove `burst`",
                algorithm.name()
            ),
        );
        return None;
    }
    let requests = NonZeroU32::new(l.requests);
    if requests.is_none() {
        err(&format!("{field}.requests"), "must be at least 1".into());
    }
    let per = match parse_period(&l.per) {
        Ok(ns) => NonZeroU64::new(ns),
        Err(e) => {
            err(&format!("{field}.per"), e.to_string());
            None
        }
    };
    let burst = NonZeroU32::new(l.burst.unwrap_or(l.requests));
    if l.burst == Some(0) {
        err(&format!("{field}.burst"), "must be at least 1".into());
    }
    let limit = Limit::new(requests?, per?, burst?).with_algorithm(algorithm);
    // A full burst's refill time, exactly (u32 × u64 fits in u128).
    let refill_ns =
        u128::from(limit.burst()) * u128::from(limit.per_ns()) / u128::from(limit.requests());
    if refill_ns > u128::from(MAX_REFILL_NS) {
        err(
            &format!("{field}.burst"),
            format!(
                "a full burst of {} takes {} days to refill at {} per `{}`; at most 366 days: raise `requests` or lower `burst`",
                limit.burst(),
                refill_ns / u128::from(86_400 * NANOS_PER_SEC),
                limit.requests(),
                l.per.trim()
            ),
        );
        return None;
    }
    if cost > limit.burst() {
        err(
            "cost",
            format!(
                "cost {cost} is above the {} {} of `{field}`: no request could ever pass",
                if algorithm.is_window() {
                    "requests"
                } else {
                    "burst"
                },
                limit.burst()
            ),
        );
        return None;
    }
    Some(limit)
}

/// Why a period was refused: the period as written, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeriodError {
    #[error("`{0}` is not a period: write a whole number and one of ms, s, m, h, d (e.g. 250ms, 1s, 1m)")]
    Unreadable(String),
    #[error("`{0}` must be between 1ms and 366d")]
    OutOfRange(String),
}

/// Parses `250ms`, `1s`, `10s`, `1m`, `1h`, `1d` into nanoseconds.
pub fn parse_period(text: &str) -> Result<u64, PeriodError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit_ns = match unit {
        "ms" => NANOS_PER_MS,
        "s" => NANOS_PER_SEC,
        "m" => 60 * NANOS_PER_SEC,
        "h" => 3_600 * NANOS_PER_SEC,
        "d" => 86_400 * NANOS_PER_SEC,
        _ => return Err(PeriodError::Unreadable(text.to_string())),
    };
    match num.parse::<u64>().ok().and_then(|n| n.checked_mul(unit_ns)) {
        Some(ns) if (NANOS_PER_MS..=MAX_PERIOD_NS).contains(&ns) => Ok(ns),
        _ => Err(PeriodError::OutOfRange(text.to_string())),
    }
}
