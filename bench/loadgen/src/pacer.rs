//! The schedule: ticket `n` is due at `start + n / rate`. The pacer sleeps until
//! the next ticket is due, then issues every ticket due by then. The timer slack
//! is lowered so sleeps end within tens of microseconds; how late the pacer
//! wakes counts as latency, the same in every configuration measured, which is
//! why figures are reported against a baseline run with the same generator.

use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

/// A request that is due.
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    pub seq: u64,
    pub due: Instant,
}

/// Issues tickets from `start` until `end`; returns how many were issued.
pub fn pace(tx: &UnboundedSender<Ticket>, rate: f64, start: Instant, end: Instant) -> u64 {
    let interval_ns = 1e9 / rate.max(0.001);
    let mut seq: u64 = 0;
    loop {
        let due = start + Duration::from_nanos((seq as f64 * interval_ns) as u64);
        if due >= end {
            return seq;
        }
        let now = Instant::now();
        if due > now {
            thread::sleep(due - now);
        }
        // Behind schedule (the pacer woke late): issue everything due now, so
        // the rate holds and the lateness shows up as latency.
        if tx.send(Ticket { seq, due }).is_err() {
            return seq;
        }
        seq += 1;
    }
}

/// Asks the kernel to wake sleeps on time (the default slack is 50 µs). The file
/// sets the process's main thread, and threads inherit it when created, so this
/// runs before any thread is spawned. Best effort: without it the pacer only
/// wakes later.
pub fn lower_timer_slack() {
    let _ = std::fs::write("/proc/self/timerslack_ns", "1000");
}
