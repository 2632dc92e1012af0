//! Rules that end by themselves: `expires` on a rule (an exception granted for a
//! migration, a launch, a customer's trial) is an instant in UTC after which the
//! rule no longer applies. The agent leaves expired rules out of the set it
//! serves (re-checked at every poll of the file), so filters stop applying them
//! within a sync interval, without anyone editing the file.

use super::config::{RuleConfig, RulesConfig};

/// Seconds since the Unix epoch of `text`, an instant in UTC written as
/// `YYYY-MM-DD` (midnight) or `YYYY-MM-DDTHH:MM:SSZ`; `None` when it is not one.
pub fn parse_instant(text: &str) -> Option<u64> {
    let (date, time) = match text.split_once('T') {
        Some((d, t)) => (d, Some(t.strip_suffix('Z')?)),
        None => (text, None),
    };
    let mut d = date.splitn(3, '-');
    let year: i64 = digits(d.next()?, 4)?;
    let month: i64 = digits(d.next()?, 2)?;
    let day: i64 = digits(d.next()?, 2)?;
    let (h, m, s) = match time {
        None => (0, 0, 0),
        Some(t) => {
            let mut t = t.splitn(3, ':');
            (
                digits(t.next()?, 2)?,
                digits(t.next()?, 2)?,
                digits(t.next()?, 2)?,
            )
        }
    };
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => return None,
    };
    if !(1970..=9999).contains(&year)
        || !(1..=days_in_month).contains(&day)
        || h > 23
        || m > 59
        || s > 59
    {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400 + h * 3_600 + m * 60 + s;
    u64::try_from(secs).ok()
}

/// The rules of `config` still in force at `now_secs` (Unix seconds): those
/// without `expires`, or whose `expires` is later. Names of the ones left out.
pub fn live_rules(config: &RulesConfig, now_secs: u64) -> (RulesConfig, Vec<String>) {
    let mut live = config.clone();
    live.rules.retain(|r| !has_expired(r, now_secs));
    (live, expired_rules(config, now_secs))
}

/// The names of `config`'s rules whose `expires` is at or before `now_secs`,
/// without a copy of the file.
pub fn expired_rules(config: &RulesConfig, now_secs: u64) -> Vec<String> {
    config
        .rules
        .iter()
        .filter(|r| has_expired(r, now_secs))
        .map(|r| r.name.clone())
        .collect()
}

fn has_expired(rule: &RuleConfig, now_secs: u64) -> bool {
    expired(rule.expires.as_deref().and_then(parse_instant), now_secs)
}

/// Whether a rule that expires at `at` (Unix seconds; `None`: never) has
/// expired at `now_secs`: at its instant and after. The one test of expiry,
/// for the served set and for `explain`.
pub fn expired(at: Option<u64>, now_secs: u64) -> bool {
    at.is_some_and(|at| at <= now_secs)
}

/// Unix second `secs` as `YYYY-MM-DDTHH:MM:SSZ`, the form [`parse_instant`]
/// reads back.
pub fn format_instant(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let s = secs % 86_400;
    // Howard Hinnant's `civil_from_days`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3_600,
        s % 3_600 / 60,
        s % 60
    )
}

fn digits(s: &str, n: usize) -> Option<i64> {
    (s.len() == n && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// Days from 1970-01-01 to the proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_are_utc_dates_or_date_times() {
        assert_eq!(parse_instant("1970-01-01"), Some(0));
        assert_eq!(parse_instant("2026-12-01T00:29:12Z"), Some(1_796_084_952));
        assert_eq!(parse_instant("2024-02-29"), Some(1_709_164_800));
        // Every fourth year is a leap year, but not a century unless it is a
        // fourth one.
        assert_eq!(parse_instant("2000-02-29"), Some(951_782_400));
        assert_eq!(parse_instant("2100-03-01"), Some(4_107_542_400));
        for bad in [
            "2023-02-29",
            "2026-13-01",
            "2026-1-01",
            "2026-12-01T00:00:00",
            "tomorrow",
            "2026-12-01T24:00:00Z",
            "2026-12-01T23:60:00Z",
            "2026-12-01T23:59:60Z",
            "2100-02-29",
            "2026-04-31",
        ] {
            assert_eq!(parse_instant(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_formatted_instant_reads_back() {
        assert_eq!(format_instant(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_instant(1_796_084_952), "2026-12-01T00:29:12Z");
        assert_eq!(format_instant(1_709_164_800), "2024-02-29T00:00:00Z");
        for t in (0..4_102_444_800u64).step_by(7_919_993) {
            assert_eq!(parse_instant(&format_instant(t)), Some(t));
        }
        // Every day of the years around two century ends, one second before
        // midnight.
        let day = 86_400;
        for start in [parse_instant("1999-01-01"), parse_instant("2099-01-01")] {
            let start = start.unwrap();
            for d in 0..2 * 366 {
                let t = start + d * day + day - 1;
                assert_eq!(parse_instant(&format_instant(t)), Some(t), "{t}");
            }
        }
    }

    #[test]
    fn a_rule_expires_at_its_instant_and_is_left_out() {
        let config: RulesConfig =
            serde_json::from_value(serde_json::json!({"version": 1, "rules": [
                {"name": "temp", "key": ["method"], "limit": {"requests": 1, "per": "1s"},
                 "expires": "2026-12-01T00:00:00Z"},
                {"name": "kept", "key": ["method"], "limit": {"requests": 1, "per": "1s"}},
            ]}))
            .unwrap();
        let at = parse_instant("2026-12-01T00:00:00Z").unwrap();
        let names = |c: &RulesConfig| c.rules.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
        let (live, expired) = live_rules(&config, at - 1);
        assert_eq!(
            (names(&live), expired),
            (vec!["temp".to_string(), "kept".to_string()], vec![])
        );
        let (live, expired) = live_rules(&config, at);
        assert_eq!(
            (names(&live), expired),
            (vec!["kept".to_string()], vec!["temp".to_string()])
        );
        assert_eq!(expired_rules(&config, at + 1), ["temp"]);
    }
}
