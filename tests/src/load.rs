//! Open-loop load for chaos tests: requests on a fixed schedule from a few
//! threads, each recorded with when it was sent, its status and its latency,
//! until the load is stopped. Bounded: it stops by itself after `max_duration`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::http::try_request;

/// One request's fate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sample {
    /// When it was sent.
    pub at: Instant,
    /// 0 when no HTTP answer came.
    pub status: u16,
    pub latency: Duration,
}

/// A running load.
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Vec<Sample>>>,
}

impl Load {
    /// Offers `rate` requests per second to `url` with `headers`, spread over
    /// `threads` threads, for at most `max_duration`.
    pub fn start(
        url: &str,
        headers: &[(&str, &str)],
        rate: f64,
        threads: usize,
        max_duration: Duration,
    ) -> Load {
        let started = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let per_thread = rate / threads as f64;
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let threads = (0..threads)
            .map(|t| {
                let (url, headers, stop) = (url.to_string(), headers.clone(), stop.clone());
                let offset = t as f64 / (per_thread * threads as f64);
                std::thread::spawn(move || {
                    run(
                        &url,
                        &headers,
                        per_thread,
                        offset,
                        started,
                        max_duration,
                        &stop,
                    )
                })
            })
            .collect();
        Load { stop, threads }
    }

    /// Stops the load and returns every sample, in the order sent.
    pub fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::SeqCst);
        let mut samples: Vec<Sample> = self
            .threads
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect();
        samples.sort();
        samples
    }
}

fn run(
    url: &str,
    headers: &[(String, String)],
    rate: f64,
    offset: f64,
    started: Instant,
    max: Duration,
    stop: &AtomicBool,
) -> Vec<Sample> {
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut samples = Vec::new();
    for i in 0u64.. {
        let due = started + Duration::from_secs_f64(offset + i as f64 / rate);
        if stop.load(Ordering::SeqCst) || due - started > max {
            break;
        }
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let sent = Instant::now();
        let status = try_request("GET", url, &headers, None).map_or(0, |r| r.status);
        samples.push(Sample {
            at: sent,
            status,
            latency: sent.elapsed(),
        });
    }
    samples
}

/// Samples sent in `[from, to)` with `status`.
pub fn count_between(samples: &[Sample], from: Instant, to: Instant, status: u16) -> usize {
    samples
        .iter()
        .filter(|s| s.at >= from && s.at < to && s.status == status)
        .count()
}

/// The `q` quantile (0..=1) of the latencies of `samples`.
pub fn latency_quantile(samples: &[&Sample], q: f64) -> Duration {
    let mut l: Vec<Duration> = samples.iter().map(|s| s.latency).collect();
    l.sort();
    let i = ((l.len() as f64 * q).ceil() as usize).saturating_sub(1);
    l.get(i).copied().unwrap_or_default()
}

/// Asserts that a drained key's `samples` sent from `from` on admitted its
/// rule's `rate` over their span, within 1%. The band widens only by what
/// the count's two ends can shift by: a request counts by when it was sent,
/// the store grants by when it ran the script, so each end moves by up to the
/// latency of the requests there (times the rate), and by one token for the
/// whole requests. For an exact rule, whose every request is a store call.
pub fn assert_admitted_at_rate(samples: &[Sample], from: Instant, rate: f64) {
    let counted: Vec<&Sample> = samples.iter().filter(|s| s.at >= from).collect();
    let (first, last) = match (counted.first(), counted.last()) {
        (Some(first), Some(last)) => (first, last),
        _ => panic!("no request sent after the key drained"),
    };
    let span = last.at.duration_since(first.at).as_secs_f64();
    let admitted = counted.iter().filter(|s| s.status == 200).count() as f64;
    let ideal = rate * span;
    let near = |end: Instant| {
        counted
            .iter()
            .filter(|s| s.at.max(end).duration_since(s.at.min(end)) < Duration::from_millis(50))
            .map(|s| s.latency)
            .max()
            .unwrap_or_default()
    };
    let edges = rate * (near(first.at) + near(last.at)).as_secs_f64() + 1.0;
    let band = (ideal * 0.01).max(edges);
    println!(
        "admitted {admitted} in {span:.2} s at {rate}/s: {ideal:.1} ideal, off by {:.2} % \
         (band ±{band:.1}: 1 % or the ends' latency, {edges:.1})",
        100.0 * (admitted - ideal) / ideal
    );
    assert!(
        (admitted - ideal).abs() <= band,
        "admitted {admitted}, ideal {ideal:.1} ± {band:.1}"
    );
}

/// Asserts what a leased key with a token bucket of `limit` a second (its
/// burst too), offered more than that, admitted across an event: over all of
/// `samples`, at most its burst and what refills (no token made, whichever
/// process decided); from `from` to `to`, the limit over that time within
/// `tolerance` of a second's limit (the tokens filters and pools hold unspent
/// at the two ends, which each test derives).
pub fn assert_limit_kept(
    samples: &[Sample],
    limit: f64,
    from: Instant,
    to: Instant,
    tolerance: f64,
) {
    let admitted = count_between(samples, from, to, 200);
    let expected = limit * (to - from).as_secs_f64();
    let (first, last) = match (samples.first(), samples.last()) {
        (Some(first), Some(last)) => (first, last),
        _ => panic!("no request sent"),
    };
    let span = (last.at + last.latency).duration_since(first.at);
    let admitted_all = samples.iter().filter(|s| s.status == 200).count();
    println!(
        "{admitted} admitted in {:?} (limit {expected:.0}), {admitted_all} in {span:?}",
        to - from
    );
    let bound = limit + limit * span.as_secs_f64();
    assert!(
        admitted_all as f64 <= bound,
        "{admitted_all} admitted, bound {bound}"
    );
    let tolerance = tolerance * limit;
    assert!(
        (admitted as f64 - expected).abs() <= tolerance,
        "{admitted} admitted in {:?}, limit {expected:.0} ± {tolerance}",
        to - from
    );
}
