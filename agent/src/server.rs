//! The socket side: accepts connections on the listen address and serves each with
//! hyper (HTTP/1.1, keep-alive: Envoy keeps a few connections to the agent open and
//! reuses them for every lease call).
//!
//! The listener binds with SO_REUSEPORT ([`bind`]): a new agent binds the same
//! port while the old one still serves, and the kernel spreads new connections
//! over both until the old one closes its listener (an upgrade on the node,
//! docs/operations/upgrading.md). On shutdown the server stops accepting (what
//! the kernel had already queued for this listener is accepted and served
//! first: closing the listener would reset it); then every response carries
//! `Connection: close`, so each open connection ends after its next answer and
//! its peer opens the next one to whoever still listens; connections the peer
//! leaves idle are closed by the peer (Envoy's cluster `idle_timeout`, below
//! `header_timeout`) or, after [`HANDOVER`], by the drain: requests in flight
//! finish, idle connections close, for at most [`DRAIN_TIMEOUT`].
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
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
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
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::api::{ApiResponse, App};
use crate::config::defaults;
use crate::shutdown::Shutdown;

/// How long, after shutdown begins, open connections are left to end on
/// their own (after their next answer, or closed by the peer when idle) before
/// the drain closes the idle ones. Closing an idle connection races a request
/// its peer may be sending on it; a connection in use ends after its next
/// answer, and one a filter's sync (every second) keeps would by then have.
pub(crate) const HANDOVER: Duration = Duration::from_secs(2);

/// How long connections may take to finish their requests once the drain
/// closes them.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The listener's accept queue: connections the kernel holds for the agent
/// before it accepts them.
const LISTEN_BACKLOG: u32 = 1024;

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

/// Binds `addr` with SO_REUSEPORT (see the module docs) and SO_REUSEADDR.
pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// What the server's connections share: the app, their limits, the open
/// connections (for the drain) and their cap, and whether shutdown has begun.
struct Conns {
    app: App,
    limits: ServerLimits,
    graceful: GracefulShutdown,
    open: Arc<Semaphore>,
    closing: Arc<AtomicBool>,
}

/// Serves `app` on `listener` within `limits` until `shutdown`, then hands
/// the connections over and drains (see the module docs).
pub(crate) async fn serve_with(
    listener: TcpListener,
    app: App,
    mut shutdown: Shutdown,
    limits: ServerLimits,
) {
    let conns = Conns {
        app,
        limits,
        graceful: GracefulShutdown::new(),
        open: Arc::new(Semaphore::new(
            limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
        )),
        closing: Arc::new(AtomicBool::new(false)),
    };
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => conns.serve(stream),
                Err(e) => {
                    // Typically out of file descriptors: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.wait() => break,
        }
    }
    conns.closing.store(true, Ordering::SeqCst);
    accept_queued(listener, &conns);
    hand_over(&conns.graceful, HANDOVER).await;
    drain(conns.graceful).await;
}

impl Conns {
    /// Serves one accepted connection, within `max_connections`.
    fn serve(&self, stream: TcpStream) {
        // At the cap the socket is dropped (closed) at once: a client
        // sees a reset or EOF and can retry, and nothing queues.
        let Ok(permit) = self.open.clone().try_acquire_owned() else {
            self.app.metrics().connection_refused();
            drop(stream);
            return;
        };
        serve_connection(stream, self, permit);
    }
}

/// Accepts, without waiting, what the kernel queued for `listener`, then
/// closes it: a connection left in the queue would be reset with it.
fn accept_queued(listener: TcpListener, conns: &Conns) {
    let Ok(listener) = listener.into_std() else {
        return;
    };
    let mut queued = 0usize;
    while let Ok((stream, _)) = listener.accept() {
        let stream = stream
            .set_nonblocking(true)
            .and_then(|()| TcpStream::from_std(stream));
        if let Ok(stream) = stream {
            conns.serve(stream);
            queued += 1;
        }
    }
    tracing::info!(queued, "stopped accepting");
}

/// Waits, at most `within`, for the open connections to end on their own.
async fn hand_over(graceful: &GracefulShutdown, within: Duration) {
    let until = tokio::time::Instant::now() + within;
    while graceful.count() > 0 && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Serves one accepted connection, in a task of its own that holds `permit`
/// (its place under `max_connections`) until the connection ends. Once
/// shutdown has begun, every answer carries `Connection: close`.
fn serve_connection(stream: TcpStream, conns: &Conns, permit: OwnedSemaphorePermit) {
    // Lease answers are small and latency-bound: never wait for Nagle.
    let _ = stream.set_nodelay(true);
    let app = conns.app.clone();
    let closing = conns.closing.clone();
    let deadline = conns.limits.header_timeout;
    let service = service_fn(move |req: Request<Incoming>| {
        let app = app.clone();
        let closing = closing.clone();
        async move {
            // The body too must arrive in time: a request whose
            // body trickles would otherwise hold its connection.
            let resp = tokio::time::timeout(deadline, app.handle(req)).await;
            let mut resp = resp.unwrap_or_else(|_| timed_out(deadline));
            if closing.load(Ordering::SeqCst) {
                resp.headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, Infallible>(resp)
        }
    });
    let conn = http1::Builder::new()
        .keep_alive(true)
        .timer(TokioTimer::new())
        .header_read_timeout(deadline)
        .max_buf_size(MAX_HEADER_BYTES)
        .serve_connection(TokioIo::new(stream), service);
    let conn = conns.graceful.watch(conn);
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

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use meshlimit_core::secret::Secret;
    use meshlimit_store::MemoryStore;

    use super::*;
    use crate::api::Auth;
    use crate::leases::LeaseSettings;
    use crate::rules_watch::CurrentRules;

    fn app() -> App {
        let secret = Secret::new(&[7; 32]).unwrap();
        let store = Arc::new(MemoryStore::new());
        let rules = Arc::new(CurrentRules::empty());
        App::standalone(rules, store, LeaseSettings::default(), Auth::new(&secret)).unwrap()
    }

    /// `GET /healthz` on `stream` (blocking, off the runtime's threads);
    /// the answer's head, lower-cased.
    async fn healthz(mut stream: std::net::TcpStream) -> String {
        tokio::task::spawn_blocking(move || {
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: agent\r\n\r\n")
                .unwrap();
            let mut answer = Vec::new();
            let mut buf = [0u8; 1024];
            while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut buf).unwrap();
                assert!(n > 0, "closed before an answer: {answer:?}");
                answer.extend_from_slice(&buf[..n]);
            }
            String::from_utf8_lossy(&answer).to_lowercase()
        })
        .await
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_agent_binds_the_port_and_a_stopping_one_answers_then_closes() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let (trigger, shutdown) = crate::shutdown::channel();
        let server = tokio::spawn(serve_with(
            listener,
            app(),
            shutdown,
            ServerLimits::default(),
        ));
        let kept = std::net::TcpStream::connect(addr).unwrap();
        let first = healthz(kept.try_clone().unwrap()).await;
        assert!(first.starts_with("http/1.1 200"), "{first}");
        assert!(!first.contains("connection: close"), "{first}");
        // The new agent binds the same port while the old one serves.
        let beside = bind(addr).unwrap();
        trigger.trigger();
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The kept connection is still answered, and told to close.
        let last = healthz(kept).await;
        assert!(last.starts_with("http/1.1 200"), "{last}");
        assert!(last.contains("connection: close"), "{last}");
        // With its connection gone, the server ends without waiting out the handover.
        tokio::time::timeout(HANDOVER / 2, server)
            .await
            .unwrap()
            .unwrap();
        drop(beside);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_queued_at_shutdown_are_answered_not_reset() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        // Connected in the kernel's queue, not yet accepted.
        let queued = std::net::TcpStream::connect(addr).unwrap();
        let conns = Conns {
            app: app(),
            limits: ServerLimits::default(),
            graceful: GracefulShutdown::new(),
            open: Arc::new(Semaphore::new(8)),
            closing: Arc::new(AtomicBool::new(true)),
        };
        accept_queued(listener, &conns);
        let answer = healthz(queued).await;
        assert!(answer.starts_with("http/1.1 200"), "{answer}");
        assert!(answer.contains("connection: close"), "{answer}");
    }
}
