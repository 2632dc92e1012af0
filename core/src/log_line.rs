//! One line of the agent's decision log (docs/guide/why-limited.md): the format
//! the agent writes and serves (`GET /v1/explain`) and `meshlimit replay` reads
//! back. A JSON object with a fixed set of fields, so a log collector ingests it as is: the filter's
//! record ([`DecisionRecord`]) with the time written out, the node and the
//! filter VM that decided.

use std::fmt;

use crate::wire::DecisionRecord;
use serde::{Deserialize, Serialize, Serializer};

/// How `time` is written: RFC 3339, UTC, milliseconds.
pub const TIME_FORMAT: &str = "2026-12-01T14:02:03.123Z";

/// One decision as the log writes it, owned (what `GET /v1/explain` shows and
/// `meshlimit replay` reads back). Written through [`LineRef`], the one
/// place the line's shape is made.
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
    pub fn new(record: DecisionRecord, node: &str, filter: &str) -> LogLine {
        LogLine {
            time: utc_millis(record.at_ms),
            node: node.to_string(),
            filter: filter.to_string(),
            record,
        }
    }
}

impl Serialize for LogLine {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        LineRef {
            node: &self.node,
            filter: &self.filter,
            record: &self.record,
        }
        .serialize(s)
    }
}

/// One line as written, borrowed from the record it tells: the agent writes
/// every rejection of its node (thousands a second under overload), so a line
/// costs no allocation but its bytes. `time` is rendered from `at_ms`.
#[derive(Debug, Clone, Copy)]
pub struct LineRef<'a> {
    pub node: &'a str,
    pub filter: &'a str,
    pub record: &'a DecisionRecord,
}

impl Serialize for LineRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Wire<'a> {
            #[serde(serialize_with = "collect")]
            time: UtcMillis,
            node: &'a str,
            filter: &'a str,
            #[serde(flatten)]
            record: &'a DecisionRecord,
            #[serde(skip_serializing_if = "Option::is_none")]
            request_id_from: Option<&'static str>,
        }
        fn collect<S: Serializer>(t: &UtcMillis, s: S) -> Result<S::Ok, S::Error> {
            s.collect_str(t)
        }
        Wire {
            time: UtcMillis(self.record.at_ms),
            node: self.node,
            filter: self.filter,
            record: self.record,
            request_id_from: self.record.request_id.as_ref().map(|_| REQUEST_ID_FROM),
        }
        .serialize(s)
    }
}

/// Where a line's `request_id` comes from (`request_id_from`): the request's
/// `x-request-id` header as the filter read it. Envoy sets it on a request from
/// outside (`use_remote_address`), but keeps the one a client inside the mesh
/// sent, so it is the client's word, not the proxy's: it finds a request a
/// client quotes, and proves nothing about who sent it.
pub const REQUEST_ID_FROM: &str = "client";

/// Milliseconds since the Unix epoch, displayed as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
#[derive(Debug, Clone, Copy)]
pub struct UtcMillis(pub u64);

impl fmt::Display for UtcMillis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0;
        let secs = ms / 1000;
        let days = i64::try_from(secs / 86_400).unwrap_or(0);
        let rem = secs % 86_400;
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60,
            ms % 1000
        )
    }
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn utc_millis(ms: u64) -> String {
    UtcMillis(ms).to_string()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_milliseconds_of_one_width() {
        assert_eq!(utc_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc_millis(1_796_133_723_123), "2026-12-01T14:02:03.123Z");
        assert_eq!(utc_millis(951_782_400_001), "2000-02-29T00:00:00.001Z");
        assert_eq!(TIME_FORMAT.len(), utc_millis(0).len());
    }
}
