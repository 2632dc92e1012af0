//! An open-loop load generator: requests are due on a fixed schedule (one every
//! `1/rate` seconds), whatever the server does, and each request's latency is
//! measured from the moment it was due, not from when a connection was free to
//! send it. A closed-loop generator (wrk) waits for answers before sending more,
//! so a server stall delays the requests that would have seen it, and the tail
//! disappears from the histogram ("coordinated omission"); this one keeps it.
//!
//! Shape: a pacer thread issues tickets (sequence number, due time) into a
//! queue; one single-threaded tokio runtime drives a pool of keep-alive HTTP/1.1
//! connections to 127.0.0.1, each taking the next ticket when free. A ticket that
//! waits in the queue because every connection is busy counts that wait as
//! latency. One thread for all connections keeps the generator's own cost per
//! request low (no thread hand-offs), so it stays far from its own saturation.

mod client;
mod options;
mod pacer;
mod summary;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Mutex};

pub use options::{LoadOptions, OptionsError, Target};
pub use summary::{Percentiles, Summary};

use client::Connection;
use pacer::Ticket;
use summary::Recorder;

/// How long past the end of the schedule requests may still complete; tickets
/// not sent by then are counted as dropped, so a run is always bounded.
const GRACE: Duration = Duration::from_secs(5);

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("histogram: {0}")]
    Histogram(#[from] hdrhistogram::CreationError),
    #[error("runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

type Queue = Arc<Mutex<mpsc::UnboundedReceiver<Ticket>>>;

/// Runs the schedule and returns what was measured.
pub fn run(options: &LoadOptions) -> Result<Summary, LoadError> {
    // Before any thread is spawned: threads inherit the timer slack.
    pacer::lower_timer_slack();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(drive(Arc::new(options.clone())))
}

async fn drive(options: Arc<LoadOptions>) -> Result<Summary, LoadError> {
    let (tx, rx) = mpsc::unbounded_channel::<Ticket>();
    let queue: Queue = Arc::new(Mutex::new(rx));
    let start = Instant::now() + Duration::from_millis(50);
    let measure_from = start + options.warmup;
    let end = measure_from + options.duration;
    let mut recorder = Recorder::new(measure_from)?;
    let mut workers = Vec::with_capacity(options.connections);
    for _ in 0..options.connections.max(1) {
        let mine = Recorder::new(measure_from)?;
        let (options, queue) = (Arc::clone(&options), Arc::clone(&queue));
        workers.push(tokio::spawn(worker(options, queue, mine, end + GRACE)));
    }
    let rate = options.rate;
    let pacer = std::thread::spawn(move || pacer::pace(&tx, rate, start, end));
    for w in workers {
        if let Ok(r) = w.await {
            recorder.merge(r);
        }
    }
    let issued = pacer.join().unwrap_or(0);
    Ok(recorder.finish(&options, issued))
}

/// One connection's loop: take the next due ticket, send, read, record.
async fn worker(
    options: Arc<LoadOptions>,
    queue: Queue,
    mut recorder: Recorder,
    deadline: Instant,
) -> Recorder {
    let mut conn: Option<Connection> = None;
    loop {
        let Some(ticket) = queue.lock().await.recv().await else {
            return recorder;
        };
        if Instant::now() > deadline {
            recorder.dropped(&ticket);
            continue;
        }
        if conn.is_none() {
            conn = Connection::open(&options.target, options.timeout)
                .await
                .ok();
        }
        let Some(c) = conn.as_mut() else {
            recorder.error(&ticket);
            // Do not spin on a refused connection: the next ticket is due soon.
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        };
        let sent_at = Instant::now();
        let request = options.request(ticket.seq);
        match tokio::time::timeout(options.timeout, c.exchange(&request)).await {
            Ok(Ok(status)) => {
                recorder.completed(&ticket, sent_at, Instant::now(), status.code);
                if status.close {
                    conn = None;
                }
            }
            Ok(Err(_)) | Err(_) => {
                recorder.error(&ticket);
                conn = None;
            }
        }
    }
}
