//! Per-node batching: lease misses bound for one Redis node go as one pipeline
//! of EVALSHA calls under one deadline, never retried. Each caller gets its
//! answer as soon as its pipeline returns.
//!
//! A batch is whatever is queued when its first job is taken: a lone miss
//! goes at once, and under load the misses that arrived while the last
//! pipeline was being sent go together, so the batch grows with the load and
//! costs no wait. There is no window that waits for more after the first job:
//! tokio's timers count whole milliseconds, so any window would cost the first
//! job up to the next millisecond tick, several times what an idle lease call
//! takes (decision record 0019).

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{Pipeline, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{timeout, Instant};

use super::script::{self, LEASE_SCRIPT};
use crate::{Acquire, Acquired, StoreError};

/// One lease to perform on this node.
pub(crate) struct Job {
    pub(crate) redis_key: String,
    pub(crate) item: Acquire,
    pub share: f64,
    /// Sent after `ASKING`: an ASK redirect named this node, whose hash slot
    /// is still importing.
    pub(crate) asking: bool,
    pub(crate) reply: oneshot::Sender<Acquired>,
}

/// Batching settings.
#[derive(Debug, Clone, Copy)]
pub struct BatchConfig {
    pub max_batch: usize,
    pub deadline: Duration,
}

/// Observes each pipeline sent (batch size, latency, result), for metrics.
pub type BatchObserver =
    std::sync::Arc<dyn Fn(usize, Duration, Result<(), &StoreError>) + Send + Sync>;

/// Observes each pipeline for the node's health: the result, and whether the
/// connection itself was lost (refused, reset, closed), not merely slow.
pub(crate) type NodeObserver =
    std::sync::Arc<dyn Fn(usize, Duration, Result<(), &StoreError>, bool) + Send + Sync>;

/// Collects jobs for one node and sends them in batches; runs until every
/// sender is dropped.
pub async fn run(
    conn: ConnectionManager,
    mut jobs: mpsc::Receiver<Job>,
    cfg: BatchConfig,
    observe: NodeObserver,
) {
    let sha = script::sha();
    while let Some(batch) = next_batch(&mut jobs, cfg.max_batch).await {
        // The pipeline runs on its own task so the next batch is taken at once.
        tokio::spawn(send(
            conn.clone(),
            batch,
            sha.clone(),
            cfg.deadline,
            observe.clone(),
        ));
    }
}

/// The next batch: the first job to arrive and every job already queued
/// behind it, at most `max_batch` in all. `None` once every sender is gone
/// and nothing is left.
async fn next_batch<T>(jobs: &mut mpsc::Receiver<T>, max_batch: usize) -> Option<Vec<T>> {
    let first = jobs.recv().await?;
    let mut batch = vec![first];
    while batch.len() < max_batch {
        match jobs.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
    Some(batch)
}

async fn send(
    mut conn: ConnectionManager,
    batch: Vec<Job>,
    sha: String,
    deadline: Duration,
    observe: NodeObserver,
) {
    let started = Instant::now();
    let result = timeout(deadline, pipeline(&mut conn, &batch, &sha)).await;
    // The node's health follows the pipeline, not its items: one item's MOVED or
    // script error says nothing of the node.
    let (answers, failure, lost) = match result {
        Ok(Ok(answers)) => (answers, None, false),
        Ok(Err(PipeError { error, lost })) => {
            (vec![Err(error.clone()); batch.len()], Some(error), lost)
        }
        Err(_) => {
            let e = StoreError::Timeout(deadline);
            (vec![Err(e.clone()); batch.len()], Some(e), false)
        }
    };
    observe(
        batch.len(),
        started.elapsed(),
        failure.as_ref().map_or(Ok(()), Err),
        lost,
    );
    for (job, answer) in batch.into_iter().zip(answers) {
        let _ = job.reply.send(answer);
    }
}

/// Runs the batch; items whose script was missing from the server's cache
/// (restart, failover, SCRIPT FLUSH) are sent again with the script's text, in
/// the same deadline: that is loading the script, not retrying a failure.
async fn pipeline(
    conn: &mut ConnectionManager,
    batch: &[Job],
    sha: &str,
) -> Result<Vec<Acquired>, PipeError> {
    let values = query(conn, batch.iter(), |p, job| {
        asking(p, job);
        p.cmd("EVALSHA").arg(sha).arg(1);
        args(p, job);
    })
    .await?;
    let mut answers: Vec<Acquired> = Vec::with_capacity(batch.len());
    let mut missing = Vec::new();
    for (i, value) in values.iter().enumerate() {
        match value {
            Value::ServerError(e) if e.code() == "NOSCRIPT" => {
                missing.push(i);
                answers.push(Err(StoreError::Failed("NOSCRIPT".into())));
            }
            Value::ServerError(e) => answers.push(Err(server_error(e))),
            v => answers.push(script::parse_reply(v)),
        }
    }
    if !missing.is_empty() {
        let again = query(
            conn,
            missing.iter().filter_map(|i| batch.get(*i)),
            |p, job| {
                asking(p, job);
                p.cmd("EVAL").arg(LEASE_SCRIPT).arg(1);
                args(p, job);
            },
        )
        .await?;
        for (i, value) in missing.into_iter().zip(again) {
            if let Some(answer) = answers.get_mut(i) {
                *answer = match &value {
                    Value::ServerError(e) => Err(server_error(e)),
                    v => script::parse_reply(v),
                };
            }
        }
    }
    Ok(answers)
}

async fn query<'a>(
    conn: &mut ConnectionManager,
    jobs: impl Iterator<Item = &'a Job>,
    mut add: impl FnMut(&mut Pipeline, &Job),
) -> Result<Vec<Value>, PipeError> {
    let mut p = redis::pipe();
    p.ignore_errors();
    for job in jobs {
        add(&mut p, job);
    }
    p.query_async(conn).await.map_err(|e| PipeError {
        lost: e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal(),
        error: StoreError::Unavailable(e.to_string()),
    })
}

/// A pipeline that got no answer, and whether its connection was lost.
struct PipeError {
    error: StoreError,
    lost: bool,
}

/// `ASKING` before a job an ASK redirect sent here: it lets the next command on
/// the connection (the job's, as a pipeline's commands go in order on one
/// connection) run in a hash slot this node is still importing. Its `OK` is
/// left out of the answers.
fn asking(p: &mut Pipeline, job: &Job) {
    if job.asking {
        p.cmd("ASKING").ignore();
    }
}

fn args(p: &mut Pipeline, job: &Job) {
    let l = &job.item.limit;
    p.arg(&job.redis_key)
        .arg(l.requests())
        .arg(l.per_ns() / 1_000_000)
        .arg(l.burst())
        .arg(job.item.min)
        .arg(job.item.max)
        .arg(job.share)
        .arg(l.algorithm().name());
}

pub(super) fn server_error(e: &redis::ServerError) -> StoreError {
    let details = e.details().unwrap_or_default();
    // `MOVED|ASK <hash slot> <host:port>`: the redirects, by type, not by their text.
    let to = details.split_whitespace().nth(1).map(str::to_string);
    match (e.code(), to) {
        ("MOVED", Some(node)) => StoreError::Moved { node },
        ("ASK", Some(node)) => StoreError::Ask { node },
        // The cluster is moving hash slots or failing over: transient. (TRYAGAIN
        // is a multi-key call in a migrating hash slot; every lease script is
        // single-key.)
        ("MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN" | "LOADING" | "MASTERDOWN", _) => {
            StoreError::Unavailable(format!("{} {}", e.code(), e.details().unwrap_or_default()))
        }
        _ => StoreError::Failed(format!("{} {}", e.code(), e.details().unwrap_or_default())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `reply`, a RESP error line, as the server sends it, mapped.
    fn mapped(reply: &str) -> StoreError {
        match redis::parse_redis_value(format!("-{reply}\r\n").as_bytes()).unwrap() {
            Value::ServerError(e) => server_error(&e),
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn redirects_map_to_their_node_and_the_rest_to_unavailable() {
        let node = || "127.0.0.1:7001".to_string();
        assert_eq!(
            mapped("MOVED 3999 127.0.0.1:7001"),
            StoreError::Moved { node: node() }
        );
        assert_eq!(
            mapped("ASK 3999 127.0.0.1:7001"),
            StoreError::Ask { node: node() }
        );
        for transient in [
            "ASK 3999",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "CLUSTERDOWN The cluster is down",
        ] {
            assert!(
                matches!(mapped(transient), StoreError::Unavailable(_)),
                "{transient}"
            );
        }
        assert!(matches!(
            mapped("ERR lease script: bad arguments"),
            StoreError::Failed(_)
        ));
    }

    #[tokio::test]
    async fn a_full_batch_goes_and_the_rest_waits_for_the_next() {
        let (tx, mut rx) = mpsc::channel(16);
        for job in 0..5 {
            tx.send(job).await.unwrap();
        }
        assert_eq!(next_batch(&mut rx, 3).await, Some(vec![0, 1, 2]));
        assert_eq!(next_batch(&mut rx, 3).await, Some(vec![3, 4]));
    }

    #[tokio::test]
    async fn a_batch_is_what_is_queued_and_nothing_waits() {
        use std::future::Future;
        use std::task::{Context, Poll, Waker};
        let (tx, mut rx) = mpsc::channel(16);
        for job in 0..3 {
            tx.send(job).await.unwrap();
        }
        // Ready at its first poll: no timer started (one would count at least
        // to the next millisecond), every queued job taken, the sender alive.
        let mut cx = Context::from_waker(Waker::noop());
        let mut first_poll = |rx: &mut mpsc::Receiver<i32>| {
            let mut batch = std::pin::pin!(next_batch(rx, 64));
            batch.as_mut().poll(&mut cx)
        };
        assert_eq!(first_poll(&mut rx), Poll::Ready(Some(vec![0, 1, 2])));
        tx.send(3).await.unwrap();
        assert_eq!(first_poll(&mut rx), Poll::Ready(Some(vec![3])));
        drop(tx);
        assert_eq!(next_batch(&mut rx, 64).await, None);
    }
}
