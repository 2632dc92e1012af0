//! The per-second CSV: one row per second for all keys (`key` = `*`), then one
//! per second for each of the busiest keys.

use crate::measure::Second;
use crate::record::Event;

pub const HEADER: &str = "second,key,offered,admitted,limited,unavailable,failed_allowed,failed_limited,ideal_allowed,limit,wrongly_limited,wrongly_allowed,redis_script_calls";

/// The CSV text of `rows`.
pub fn render(rows: &[Second]) -> String {
    let mut out = String::with_capacity(64 * (rows.len() + 1));
    out.push_str(HEADER);
    out.push('\n');
    for r in rows {
        let key = r.key.map_or_else(|| "*".to_string(), |k| format!("k{k}"));
        let scripts = r.scripts.map(|n| n.to_string()).unwrap_or_default();
        out.push_str(&format!(
            "{},{key},{},{},{},{},{},{},{},{:.3},{},{},{scripts}\n",
            r.second,
            r.offered,
            r.admitted,
            r.limited,
            r.unavailable,
            r.failed_allowed,
            r.failed_limited,
            r.ideal,
            r.limit,
            r.wrongly_limited,
            r.wrongly_allowed,
        ));
    }
    out
}

/// Every request, in decision order: times in ns since the run's start.
pub fn events(events: &[Event]) -> String {
    let mut out = String::with_capacity(48 * (events.len() + 1));
    out.push_str("arrived_ns,decided_ns,gateway,key,decision,local,ideal_admit,wrong,held_back\n");
    for e in events {
        out.push_str(&format!(
            "{},{},{},k{},{:?},{},{},{},{}\n",
            e.arrived_ns,
            e.decided_ns,
            e.gateway,
            e.key,
            e.decision,
            u8::from(e.local),
            u8::from(e.ideal_admit),
            u8::from(e.wrong),
            u8::from(e.held_back)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_follow_the_header() {
        let row = Second {
            second: 3,
            key: None,
            offered: 30,
            admitted: 10,
            limited: 20,
            ideal: 10,
            limit: 10.0,
            scripts: Some(4),
            ..Second::default()
        };
        let text = render(&[row]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1], "3,*,30,10,20,0,0,0,10,10.000,0,0,4");
        assert_eq!(lines[0].split(',').count(), lines[1].split(',').count());
    }
}
