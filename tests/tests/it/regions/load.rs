//! A client that offers a key a fixed rate of requests through one agent, the way
//! a filter spends leases: a request takes a token of its last grant while the
//! grant lasts, else asks the agent. Denials are not cached, so the agent sees
//! every request offered. Admitted tokens are counted when granted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use meshlimit_tests::Agent;

use super::mesh::{lease_url, now};

/// Tokens granted at an instant (Unix seconds).
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    pub at: f64,
    pub tokens: u32,
}

pub struct Offer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Grant>>>,
}

impl Offer {
    /// Offers `rate` requests per second for `key` through `agent`.
    pub fn start(agent: &Agent, key: &str, rate: f64) -> Offer {
        let stop = Arc::new(AtomicBool::new(false));
        let agent_url = agent.base_url();
        let (key, flag) = (key.to_string(), stop.clone());
        let thread = std::thread::spawn(move || offer(&agent_url, &key, rate, &flag));
        Offer {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops offering; the grants received.
    pub fn stop(mut self) -> Vec<Grant> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Offer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn offer(agent_url: &str, key: &str, rate: f64, stop: &AtomicBool) -> Vec<Grant> {
    let started = Instant::now();
    let (mut offered, mut tokens, mut expires) = (0u64, 0u32, started);
    let mut grants = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let due = (started.elapsed().as_secs_f64() * rate) as u64;
        while offered < due && !stop.load(Ordering::Relaxed) {
            offered += 1;
            if tokens > 0 && Instant::now() < expires {
                tokens -= 1;
                continue;
            }
            if let Some(answer) = lease_url(agent_url, key, 1) {
                if answer["result"] == "grant" {
                    let granted = answer["tokens"].as_u64().unwrap_or(0) as u32;
                    let ttl = answer["ttl_ms"].as_u64().unwrap_or(0);
                    grants.push(Grant {
                        at: now(),
                        tokens: granted,
                    });
                    tokens = granted.saturating_sub(1);
                    expires = Instant::now() + Duration::from_millis(ttl);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    grants
}

/// Admitted tokens per region in bins of `bin` seconds from `t0`: `bins[i][r]`.
pub fn binned(regions: &[Vec<Grant>], t0: f64, bin: f64, until: f64) -> Vec<Vec<f64>> {
    let n = ((until - t0) / bin).ceil().max(0.0) as usize;
    let mut bins = vec![vec![0.0; regions.len()]; n];
    for (r, grants) in regions.iter().enumerate() {
        for g in grants {
            let i = ((g.at - t0) / bin).floor();
            if i >= 0.0 && (i as usize) < n {
                bins[i as usize][r] += f64::from(g.tokens);
            }
        }
    }
    bins
}

/// The most admitted over all regions in any window of `width` bins.
pub fn max_window(bins: &[Vec<f64>], width: usize) -> f64 {
    let totals: Vec<f64> = bins.iter().map(|b| b.iter().sum()).collect();
    totals
        .windows(width.min(totals.len()).max(1))
        .map(|w| w.iter().sum())
        .fold(0.0, f64::max)
}
