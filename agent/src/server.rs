//! The socket side: accepts connections on the listen address and serves each with
//! hyper (HTTP/1.1, keep-alive: Envoy keeps a few connections to the agent open and
//! reuses them for every lease call). On shutdown it stops accepting, lets requests
//! in flight finish, and closes idle connections.
//!
//! Bounded ([`ServerLimits`]): at most `max_connections` open at once, a connection
//! past that is closed as soon as it is accepted (counted in
//! `meshlimit_connections_refused_total`) rather than queued; a request whose
//! header has not fully arrived `header_timeout` after it began (or after the
//! connection went idle between requests) gets its connection closed, and one whose
//! body has not arrived and been answered within as long again gets 408 and its
//! connection closed, so half-sent requests cannot pin connections; a request's
//! header is at most [`MAX_HEADER_BYTES`] (431 past it), and the body cap
//! (`wire::MAX_BODY_BYTES`, 64 KiB) is the API's. So the worst a peer can make
//! the agent hold is `max_connections` connections, each with a full header and
//! a full body buffered (what that is in memory: docs/operations/capacity.md).
//!
//! hyper runs the header timer from the moment it waits for a request's head, so a
//! keep-alive connection idle for `header_timeout` (no request begun) is closed
//! too. Envoy sees the close and drops the connection from its pool; only a lease
//! call sent in the microseconds between the agent's close and Envoy noticing it
//! fails (the filter applies the rule's failure policy to that request). An Envoy
//! cluster `idle_timeout` below `header_timeout` removes even that.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::api::{ApiResponse, App};
use crate::config::defaults;
use crate::shutdown::Shutdown;

/// How long connections may take to finish their requests after shutdown begins.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The most bytes of one request's header (request line and fields) the agent
/// buffers; a longer header gets 431. The filters send a few hundred bytes; 8 KiB
/// is hyper's smallest buffer (and nginx's default for large headers).
pub(crate) const MAX_HEADER_BYTES: usize = 8 * 1024;

/// What one peer, or many, can hold of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServerLimits {
    /// Connections open at once. The default (`--max-connections`'), as many as
    /// `--max-inflight`'s: an
    /// Envoy keeps about one connection per lease call in flight on each worker (a
    /// few per worker at a few thousand lease calls a second), so a node of 50
    /// sidecars × 2 workers sits near a few hundred; more connections than the
    /// lease calls the agent serves at once would only wait.
    pub(crate) max_connections: usize,
    /// How long a request's header may take to arrive, counted from the end of
    /// the previous response (so also how long a keep-alive connection may stay
    /// idle); then, once it has, how long its body may take to arrive and be
    /// answered (408 past it, and the connection is closed). Lease calls are
    /// answered within the store deadline (3 ms), so 5 s only ever cuts off a
    /// stalled or hostile peer, or a connection unused for 5 s.
    pub(crate) header_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_connections: usize::try_from(defaults::MAX_CONNECTIONS).unwrap_or(usize::MAX),
            header_timeout: Duration::from_millis(defaults::HEADER_TIMEOUT_MS),
        }
    }
}

/// The answer to a request not read and answered within `deadline`.
fn timed_out(deadline: Duration) -> ApiResponse {
    let body = format!(
        "{{\"error\":\"request_timeout\",\"detail\":\"request not received and answered within {deadline:?}\"}}"
    );
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = StatusCode::REQUEST_TIMEOUT;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// Serves `app` on `listener` within `limits` until `shutdown`, then drains.
pub(crate) async fn serve_with(
    listener: TcpListener,
    app: App,
    mut shutdown: Shutdown,
    limits: ServerLimits,
) {
    let graceful = GracefulShutdown::new();
    let open = Arc::new(Semaphore::new(
        limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    // At the cap the socket is dropped (closed) at once: a client
                    // sees a reset or EOF and can retry, and nothing queues.
                    let Ok(permit) = open.clone().try_acquire_owned() else {
                        app.metrics().connection_refused();
                        drop(stream);
                        continue;
                    };
                    serve_connection(stream, &app, limits, &graceful, permit);
                }
                Err(e) => {
                    // Typically out of file descriptors: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.wait() => break,
        }
    }
    drop(listener);
    drain(graceful).await;
}

/// Serves `app` on one accepted connection, in a task of its own that holds
/// `permit` (its place under `max_connections`) until the connection ends.
fn serve_connection(
    stream: TcpStream,
    app: &App,
    limits: ServerLimits,
    graceful: &GracefulShutdown,
    permit: OwnedSemaphorePermit,
) {
    // Lease answers are small and latency-bound: never wait for Nagle.
    let _ = stream.set_nodelay(true);
    let app = app.clone();
    let deadline = limits.header_timeout;
    let service = service_fn(move |req: Request<Incoming>| {
        let app = app.clone();
        async move {
            // The body too must arrive in time: a request whose
            // body trickles would otherwise hold its connection.
            let resp = tokio::time::timeout(deadline, app.handle(req)).await;
            Ok::<_, Infallible>(resp.unwrap_or_else(|_| timed_out(deadline)))
        }
    });
    let conn = http1::Builder::new()
        .keep_alive(true)
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_HEADER_BYTES)
        .serve_connection(TokioIo::new(stream), service);
    let conn = graceful.watch(conn);
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("connection ended with an error: {e}");
        }
        drop(permit);
    });
}

/// Lets the connections still open finish their requests, for at most
/// [`DRAIN_TIMEOUT`].
async fn drain(graceful: GracefulShutdown) {
    let open = graceful.count();
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!(open, "connections drained"),
        _ = tokio::time::sleep(DRAIN_TIMEOUT) => {
            tracing::warn!("connections still open after {DRAIN_TIMEOUT:?}; closing them");
        }
    }
}
