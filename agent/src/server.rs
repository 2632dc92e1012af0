//! The socket side: accepts connections on the listen address and serves each with
//! hyper (HTTP/1.1, keep-alive: Envoy keeps a few connections to the agent open and
//! reuses them for every lease call). On shutdown it stops accepting, lets requests
//! in flight finish, and closes idle connections.

use std::convert::Infallible;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::Request;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::api::App;
use crate::shutdown::Shutdown;

/// How long connections may take to finish their requests after shutdown begins.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `app` on `listener` until `shutdown`, then drains.
pub async fn serve(listener: TcpListener, app: App, mut shutdown: Shutdown) {
    let graceful = GracefulShutdown::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    // Lease answers are small and latency-bound: never wait for Nagle.
                    let _ = stream.set_nodelay(true);
                    let app = app.clone();
                    let service = service_fn(move |req: Request<Incoming>| {
                        let app = app.clone();
                        async move { Ok::<_, Infallible>(app.handle(req).await) }
                    });
                    let conn = http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(stream), service);
                    let conn = graceful.watch(conn);
                    tokio::spawn(async move {
                        if let Err(e) = conn.await {
                            tracing::debug!("connection ended with an error: {e}");
                        }
                    });
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
    let open = graceful.count();
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!(open, "connections drained"),
        _ = tokio::time::sleep(DRAIN_TIMEOUT) => {
            tracing::warn!("connections still open after {DRAIN_TIMEOUT:?}; closing them");
        }
    }
}
