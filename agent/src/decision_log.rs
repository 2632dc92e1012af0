//! The decision log: the records the node's filters hand over in batches
//! (`POST /v1/decisions`), written as JSON lines to stdout or to size-capped
//! rotating files (`--decision-log`), and kept in memory, bounded, for the
//! online explain (`GET /v1/explain`: a key's recent decisions) and the
//! operator's view of a rule's hottest keys (`GET /v1/hot`).
//!
//! A line is one line of printable text whatever the filter sent: every
//! character that does not print (a line separator, a bidi control) is a
//! JSON `\uXXXX` escape ([`crate::printable`]).
//!
//! Memory is bounded everywhere, in bytes as well as in records: the API
//! refuses a record past its field bounds (`api::decisions`: at most
//! `MAX_RECORD_TEXT` bytes of text a record, 128 records a call); the writer's
//! queue holds at most [`QUEUE_LINES`] lines and [`QUEUE_BYTES`] bytes of them
//! (past either a line is dropped and counted in
//! `meshlimit_decision_log_dropped_total{at="agent"}`), the recent ring
//! [`RECENT_RECORDS`] records and [`RECENT_BYTES`] bytes (the oldest go
//! first), the hot keys [`HOT_KEYS`] counters. A flood of maximal records
//! therefore holds at most about 5 MiB here, whoever sends it.

mod recent;
mod writer;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use meshlimit_core::wire::DecisionsRequest;

pub use meshlimit_core::log_line::{LogLine, TIME_FORMAT};
pub use recent::{HotKey, HOT_KEYS, HOT_SHOWN, RECENT_BYTES, RECENT_RECORDS, RECENT_SHOWN};

pub mod metrics;

use meshlimit_core::log_line::LineRef;
pub use metrics::DecisionLogMetrics;
use recent::{Kept, Recent};

/// Lines waiting for the writer at most; past it new lines are dropped.
pub const QUEUE_LINES: usize = 8_192;
/// Bytes of lines waiting for the writer at most (a second of a busy node's
/// rejections at ~400 bytes a line is ~4 MB); past it new lines are dropped.
pub const QUEUE_BYTES: usize = 4 << 20;

/// What the log holds in memory now, in bytes (see the module's bounds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldBytes {
    /// Lines waiting for the writer (at most [`QUEUE_BYTES`]).
    pub queued: usize,
    /// The recent ring (at most [`RECENT_BYTES`]).
    pub recent: usize,
}

/// Where the log goes (`--decision-log`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Stdout,
    /// `path`, rotated to `path.1` … `path.<files-1>` when it would pass
    /// `max_bytes`; the oldest is deleted.
    Files {
        path: PathBuf,
        max_bytes: u64,
        files: u32,
    },
}

/// The node's decision log.
pub struct DecisionLog {
    /// This agent's name for the node (the `node` of every line).
    node: String,
    /// The writer's queue; `None` when the log is written nowhere (the ring
    /// and the hot keys are kept all the same).
    tx: Option<SyncSender<Vec<u8>>>,
    /// Bytes of the lines in the writer's queue (the writer takes off what it wrote).
    queued: Arc<AtomicUsize>,
    recent: Mutex<Recent>,
    metrics: Arc<DecisionLogMetrics>,
}

impl DecisionLog {
    /// Starts the writer thread for `target` (none: kept in memory only).
    pub fn start(
        target: Option<Target>,
        node: &str,
        metrics: Arc<DecisionLogMetrics>,
    ) -> std::io::Result<Arc<DecisionLog>> {
        let queued = Arc::new(AtomicUsize::new(0));
        let tx = match target {
            Some(target) => {
                let out = writer::Out::open(&target)?;
                let (tx, rx) = sync_channel(QUEUE_LINES);
                let (m, q) = (metrics.clone(), queued.clone());
                std::thread::Builder::new()
                    .name("decision-log".into())
                    .spawn(move || writer::run(out, rx, &q, &m))?;
                Some(tx)
            }
            None => None,
        };
        Ok(Arc::new(DecisionLog {
            node: node.to_string(),
            tx,
            queued,
            recent: Mutex::new(Recent::default()),
            metrics,
        }))
    }

    /// A log kept in memory only (explain, hot keys), written nowhere.
    pub fn in_memory(metrics: Arc<DecisionLogMetrics>) -> Arc<DecisionLog> {
        Arc::new(DecisionLog {
            node: String::new(),
            tx: None,
            queued: Arc::new(AtomicUsize::new(0)),
            recent: Mutex::new(Recent::default()),
            metrics,
        })
    }

    /// `n` records of a batch refused (their rule is not in force).
    pub fn refused(&self, n: u64) {
        self.metrics.decision_log_dropped("refused", n);
    }

    /// Takes a filter's batch (validated by the API): each record to the
    /// writer's queue (dropped and counted when it is full), the ring and the
    /// hot keys.
    pub fn accept(&self, batch: DecisionsRequest) {
        if batch.dropped > 0 {
            self.metrics.decision_log_dropped("filter", batch.dropped);
        }
        let filter: Arc<str> = Arc::from(batch.filter_id);
        let mut recent = lock(&self.recent);
        for record in batch.records {
            if let Some(tx) = &self.tx {
                let line = LineRef {
                    node: &self.node,
                    filter: &filter,
                    record: &record,
                };
                let mut bytes = meshlimit_core::printable::json_escaped(
                    serde_json::to_vec(&line).unwrap_or_default(),
                );
                bytes.push(b'\n');
                self.enqueue(tx, bytes);
            }
            recent.push(Kept {
                filter: filter.clone(),
                record,
            });
        }
    }

    /// Hands `line` to the writer, unless the queue is full in lines or bytes.
    fn enqueue(&self, tx: &SyncSender<Vec<u8>>, line: Vec<u8>) {
        let len = line.len();
        let room = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                (q + len <= QUEUE_BYTES).then_some(q + len)
            })
            .is_ok();
        let sent = room
            && match tx.try_send(line) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                    self.queued.fetch_sub(len, Ordering::AcqRel);
                    false
                }
            };
        if !sent {
            self.metrics.decision_log_dropped("agent", 1);
        }
    }

    /// What the log holds in memory now.
    pub fn held_bytes(&self) -> HeldBytes {
        HeldBytes {
            queued: self.queued.load(Ordering::Acquire),
            recent: lock(&self.recent).bytes,
        }
    }

    /// The recent records of `key_id` under `rule`, newest first (at most
    /// [`RECENT_SHOWN`]).
    pub(crate) fn recent(&self, rule: &str, key_id: &str) -> Vec<LogLine> {
        lock(&self.recent).of_key(&self.node, rule, key_id)
    }

    /// `rule`'s hottest keys (at most [`HOT_SHOWN`]).
    pub(crate) fn hot(&self, rule: &str) -> Vec<HotKey> {
        lock(&self.recent).hot(rule)
    }
}

/// The ring and counters are plain data: consistent after a panic elsewhere.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
