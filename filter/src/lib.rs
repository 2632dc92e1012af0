//! meshlimit's proxy-wasm filter. It decides locally from per-key state in shared
//! data (denial cache, leased tokens), asks the node's agent only on a miss, and
//! applies each rule's failure policy when the agent cannot answer in time.
//!
//! Layout: `host` is the only module that calls hostcalls; `pipeline` is the
//! request path as plain code over the `Host` trait (tested natively with a fake
//! host); `backoff` decides when misses skip the agent, `usage` answers the usage
//! path and `decided` names a decision for the access log, over the same trait; `root` and `http` are the proxy-wasm contexts that glue them to Envoy.
//! `unwrap`, `expect` and `panic!` are denied: a panic traps the whole VM.

pub mod backoff;
pub mod config;
mod counts;
pub mod decided;
pub mod flights;
pub mod host;
mod http;
pub mod pipeline;
mod reload;
mod root;
pub mod slots;
mod state;
pub mod usage;

// The SDK's entry point exports `_initialize` (`#[no_mangle]`) and calls the
// WASI constructors in an `unsafe` block; that is the only unsafe code here.
#[allow(unsafe_code)]
mod entry {
    use proxy_wasm::traits::RootContext;
    use proxy_wasm::types::LogLevel;

    proxy_wasm::main! {{
        proxy_wasm::set_log_level(LogLevel::Info);
        proxy_wasm::set_root_context(|id| -> Box<dyn RootContext> { Box::new(crate::root::Root::new(id)) });
    }}
}
