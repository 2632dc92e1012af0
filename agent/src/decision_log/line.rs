//! One line of the decision log (README, "Decision log"): a JSON object with a
//! fixed set of fields, so a log collector ingests it as is: the filter's
//! record ([`DecisionRecord`]) with the time written out, the node and the
//! filter VM that decided.

use meshlimit_core::wire::DecisionRecord;
use serde::{Deserialize, Serialize};

/// How `time` is written: RFC 3339, UTC, milliseconds.
pub const TIME_FORMAT: &str = "2026-12-01T14:02:03.123Z";

/// One decision as the log writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogLine {
    /// When the filter decided ([`TIME_FORMAT`]; `at_ms` is the same instant).
    pub time: String,
    /// The agent's name for the node.
    pub node: String,
    /// The filter VM that decided (Envoy node id and VM number).
    pub filter: String,
    #[serde(flatten)]
    pub record: DecisionRecord,
}

impl LogLine {
    pub(crate) fn new(record: DecisionRecord, node: &str, filter: &str) -> LogLine {
        LogLine {
            time: utc_millis(record.at_ms),
            node: node.to_string(),
            filter: filter.to_string(),
            record,
        }
    }
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub(crate) fn utc_millis(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// The date of a day count since 1970-01-01 (H. Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
