//! Recording and summarising: an HDR histogram per connection thread (merged at
//! the end), latency from the due time and service time from the actual send.

use std::collections::BTreeMap;
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::options::LoadOptions;
use crate::pacer::Ticket;

/// Histogram range: 1 ns to 60 s, three significant digits.
const MAX_NS: u64 = 60_000_000_000;

/// One run's figures. Latencies are in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub rate: f64,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub connections: usize,
    /// Tickets issued, warm-up included.
    pub issued: u64,
    /// Measured requests answered, failed (connection error, timeout, bad
    /// response), and never sent because the run's grace period was over.
    pub completed: u64,
    pub errors: u64,
    pub dropped: u64,
    /// Answers by status code.
    pub status: BTreeMap<u16, u64>,
    pub achieved_rps: f64,
    /// From the due time to the end of the response: what a client saw.
    pub latency_us: Percentiles,
    /// From the actual send to the end of the response: what the server took.
    pub service_us: Percentiles,
    /// `latency_us` of the 2xx answers only: what an admitted request saw when
    /// a limiter rejects some (its rejections are answered sooner or later
    /// than its admissions, and would move the percentiles either way).
    pub admitted_us: Percentiles,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

/// What one connection thread (or, merged, the whole run) measured.
pub struct Recorder {
    measure_from: Instant,
    latency: Histogram<u64>,
    service: Histogram<u64>,
    admitted: Histogram<u64>,
    status: BTreeMap<u16, u64>,
    errors: u64,
    dropped: u64,
}

impl Recorder {
    /// Records tickets due at or after `measure_from` (the end of the warm-up).
    pub fn new(measure_from: Instant) -> Result<Recorder, hdrhistogram::CreationError> {
        Ok(Recorder {
            measure_from,
            latency: Histogram::new_with_bounds(1, MAX_NS, 3)?,
            service: Histogram::new_with_bounds(1, MAX_NS, 3)?,
            admitted: Histogram::new_with_bounds(1, MAX_NS, 3)?,
            status: BTreeMap::new(),
            errors: 0,
            dropped: 0,
        })
    }

    pub fn completed(&mut self, t: &Ticket, sent: Instant, done: Instant, code: u16) {
        if t.due < self.measure_from {
            return;
        }
        let ns = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(MAX_NS);
        let latency = ns(done.saturating_duration_since(t.due));
        self.latency.saturating_record(latency);
        if (200..300).contains(&code) {
            self.admitted.saturating_record(latency);
        }
        self.service
            .saturating_record(ns(done.saturating_duration_since(sent)));
        *self.status.entry(code).or_default() += 1;
    }

    pub fn error(&mut self, t: &Ticket) {
        if t.due >= self.measure_from {
            self.errors += 1;
        }
    }

    pub fn dropped(&mut self, t: &Ticket) {
        if t.due >= self.measure_from {
            self.dropped += 1;
        }
    }

    pub fn merge(&mut self, other: Recorder) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.latency.add(&other.latency);
        let _ = self.service.add(&other.service);
        let _ = self.admitted.add(&other.admitted);
        for (code, n) in other.status {
            *self.status.entry(code).or_default() += n;
        }
        self.errors += other.errors;
        self.dropped += other.dropped;
    }

    pub fn finish(self, options: &LoadOptions, issued: u64) -> Summary {
        let completed = self.latency.len();
        let duration_s = options.duration.as_secs_f64();
        Summary {
            rate: options.rate,
            duration_s,
            warmup_s: options.warmup.as_secs_f64(),
            connections: options.connections,
            issued,
            completed,
            errors: self.errors,
            dropped: self.dropped,
            status: self.status,
            achieved_rps: completed as f64 / duration_s,
            latency_us: percentiles(&self.latency),
            service_us: percentiles(&self.service),
            admitted_us: percentiles(&self.admitted),
        }
    }
}

fn percentiles(h: &Histogram<u64>) -> Percentiles {
    let us = |ns: u64| ns as f64 / 1_000.0;
    Percentiles {
        p50: us(h.value_at_quantile(0.50)),
        p90: us(h.value_at_quantile(0.90)),
        p99: us(h.value_at_quantile(0.99)),
        p999: us(h.value_at_quantile(0.999)),
        max: us(h.max()),
        mean: h.mean() / 1_000.0,
    }
}

impl Summary {
    /// The CSV header matching [`Summary::csv_row`].
    pub const CSV_HEADER: &'static str = "rate,duration_s,connections,issued,completed,errors,dropped,non_2xx,achieved_rps,p50_us,p90_us,p99_us,p999_us,max_us,mean_us,service_p50_us,service_p99_us,service_p999_us,admitted_p50_us,admitted_p99_us,admitted_p999_us";

    /// Answers whose status is not 2xx.
    pub fn non_2xx(&self) -> u64 {
        self.status
            .iter()
            .filter(|(code, _)| !(200..300).contains(*code))
            .map(|(_, n)| n)
            .sum()
    }

    pub fn csv_row(&self) -> String {
        let (l, s, a) = (&self.latency_us, &self.service_us, &self.admitted_us);
        format!(
            "{},{},{},{},{},{},{},{},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1}",
            self.rate,
            self.duration_s,
            self.connections,
            self.issued,
            self.completed,
            self.errors,
            self.dropped,
            self.non_2xx(),
            self.achieved_rps,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.max,
            l.mean,
            s.p50,
            s.p99,
            s.p999,
            a.p50,
            a.p99,
            a.p999
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::options::Target;

    #[test]
    fn admitted_latency_leaves_out_rejections() -> Result<(), Box<dyn std::error::Error>> {
        let start = Instant::now();
        let mut r = Recorder::new(start)?;
        for seq in 0..100 {
            let t = Ticket { seq, due: start };
            // Admitted answers take 1 ms; the rejections 50 ms.
            let (code, took) = if seq % 2 == 0 { (200, 1) } else { (429, 50) };
            r.completed(&t, start, start + Duration::from_millis(took), code);
        }
        let target = Target::parse("http://127.0.0.1:1/")?;
        let options = LoadOptions::new(target, 100.0, Duration::from_secs(1))?;
        let s = r.finish(&options, 100);
        assert_eq!(s.completed, 100);
        assert_eq!(s.non_2xx(), 50);
        assert!(s.latency_us.p99 >= 49_000.0, "{s:?}");
        assert!(s.admitted_us.p99 <= 1_001.0, "{s:?}");
        assert!(s.admitted_us.p50 >= 999.0, "{s:?}");
        let columns = Summary::CSV_HEADER.split(',').count();
        assert_eq!(s.csv_row().split(',').count(), columns);
        Ok(())
    }
}
