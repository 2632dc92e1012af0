//! Periods: whole seconds of the wall clock (Unix time), the same in every region
//! as far as NTP keeps hosts together. Each region task runs once a period at a
//! fixed offset into it, so the agents' flush, the rebalancers' reads and the
//! agents' refresh follow each other in order within a few tens of milliseconds
//! everywhere.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A period: one second.
pub(crate) const PERIOD: Duration = Duration::from_secs(1);

/// Milliseconds of Unix time.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Nanoseconds of Unix time (to the millisecond): the clock schedule
/// windows follow.
pub(crate) fn now_ns() -> u64 {
    now_ms().saturating_mul(1_000_000)
}

/// Seconds of Unix time.
pub fn now_secs() -> u64 {
    period_of(now_ms())
}

/// The period (Unix second) holding `ms`.
pub(crate) fn period_of(ms: u64) -> u64 {
    ms / 1_000
}

/// How long from `now_ms` until the next instant `offset` past a multiple of
/// `every` (a period, or a slice of one).
pub(crate) fn until_offset(now_ms: u64, every: Duration, offset: Duration) -> Duration {
    let every = duration_ms(every).max(1);
    let offset = duration_ms(offset) % every;
    let into = now_ms % every;
    let wait = if into < offset {
        offset - into
    } else {
        every - into + offset
    };
    Duration::from_millis(wait)
}

/// Sleeps until the next instant `offset` past a multiple of `every` and returns
/// the period it falls in. Sleeps are measured on tokio's clock but aimed at the
/// wall clock: a wake-up that comes early sleeps the rest, so an instant is never
/// run twice.
pub(crate) async fn at_offset(every: Duration, offset: Duration) -> u64 {
    let now = now_ms();
    let target = now.saturating_add(duration_ms(until_offset(now, every, offset)));
    loop {
        let now = now_ms();
        if now >= target {
            return period_of(target);
        }
        // Bounded, so a wall clock stepped back by NTP costs at most a period.
        tokio::time::sleep(Duration::from_millis((target - now).min(1_000))).await;
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_the_next_offset() {
        let ms = Duration::from_millis;
        let s = ms(1_000);
        assert_eq!(until_offset(10_000, s, ms(25)), ms(25));
        assert_eq!(until_offset(10_024, s, ms(25)), ms(1));
        assert_eq!(until_offset(10_025, s, ms(25)), ms(1_000));
        assert_eq!(until_offset(10_900, s, ms(25)), ms(125));
        assert_eq!(until_offset(10_900, ms(250), ms(5)), ms(105));
        assert_eq!(period_of(10_999), 10);
    }
}
