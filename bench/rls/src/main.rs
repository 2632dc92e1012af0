//! `meshlimit-bench-rls`: the per-request remote check `make bench` compares
//! meshlimit's cold keys with. A minimal gRPC server for Envoy's ratelimit
//! filter (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`) that
//! does per request what envoyproxy/ratelimit does: one Redis round trip, a
//! fixed-window counter (see `counter`).

mod counter;
mod grpc;
mod proto;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::counter::Counter;

/// Connections served at once; more wait to be accepted. With
/// [`MAX_STREAMS`] streams of at most `proto::MAX_MESSAGE` bytes each, this
/// bounds what clients can make the service hold.
const MAX_CONNECTIONS: usize = 64;
/// Concurrent gRPC calls per connection.
const MAX_STREAMS: u32 = 256;
/// Bytes of request headers per call.
const MAX_HEADER_LIST: u32 = 16 * 1024;

#[derive(Debug, Parser)]
#[command(
    name = "meshlimit-bench-rls",
    version,
    about = "make bench's per-request remote check: a minimal gRPC rate limit service \
             (envoy.service.ratelimit.v3) for Envoy's ratelimit filter, doing what \
             envoyproxy/ratelimit does per request: one Redis round trip, INCRBY + EXPIRE \
             of a fixed-window counter. Not a production rate limiter."
)]
struct Cli {
    /// Address to serve gRPC (HTTP/2 without TLS) on.
    #[arg(long, default_value = "127.0.0.1:8083")]
    listen: SocketAddr,
    /// The Redis server holding the counters.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Hits a descriptor may have per window; past it the answer is OVER_LIMIT.
    #[arg(long)]
    limit: u64,
    /// The fixed window, in seconds (also each counter's EXPIRE).
    #[arg(long, default_value_t = 1)]
    window_seconds: u64,
}

#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error(transparent)]
    Start(#[from] counter::StartError),
    #[error("listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("meshlimit-bench-rls: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Connects to Redis, then serves until killed.
async fn run(cli: Cli) -> Result<(), RunError> {
    let counter = Arc::new(Counter::connect(&cli.redis, cli.limit, cli.window_seconds).await?);
    let listener = TcpListener::bind(cli.listen)
        .await
        .map_err(|e| RunError::Listen(cli.listen, e))?;
    eprintln!(
        "meshlimit-bench-rls: serving on {}, limit {} per {} s",
        cli.listen, counter.limit, counter.window_s
    );
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return Ok(());
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                eprintln!("meshlimit-bench-rls: accept: {e}");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let counter = counter.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| grpc::handle(req, counter.clone()));
            let served = http2::Builder::new(TokioExecutor::new())
                .max_concurrent_streams(MAX_STREAMS)
                .max_header_list_size(MAX_HEADER_LIST)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                eprintln!("meshlimit-bench-rls: connection: {e}");
            }
            drop(permit);
        });
    }
}
