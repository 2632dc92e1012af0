//! meshlimit's proxy-wasm filter. It decides locally from per-key state in shared
//! data (denial cache, leased tokens), asks the node's agent only on a miss, and
//! applies each rule's failure policy when the agent cannot answer in time.
//!
//! Layout: `host` holds the traits every interaction with the proxy goes
//! through (`Host`: clock and shared data; `Proxy`: the rest) and `ProxyHost`,
//! the only code that calls hostcalls. `pipeline` is the request path as plain
//! code over `Host`; `flights` the VM's lease calls, `backoff` when misses skip
//! the agent, `reload` a new rules version compiled a slice at a time,
//! `slices` a worker's own slices of its hot keys' leases, `usage`
//! the usage path, `decided` a decision's name for the access log and `declog`
//! the VM's buffer of decision log records, over the same trait. `root` and `http` are the proxy-wasm
//! contexts, generic over `Proxy`: Envoy runs them over `ProxyHost`, the tests
//! over `testing::MemoryHost` (feature `test-util`, also used by the simulator).
//! `unwrap`, `expect` and `panic!` are denied: a panic traps the whole VM.

pub mod allowance;
pub mod backoff;
pub mod config;
mod counts;
pub mod decided;
pub mod declog;
mod fast_map;
mod fields;
mod finish;
pub mod flights;
pub mod host;
mod http;
pub mod pipeline;
mod reload;
mod root;
pub mod slices;
pub mod slots;
mod state;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
#[cfg(test)]
mod tests;
pub mod usage;

// The SDK's entry point exports `_initialize` (`#[no_mangle]`) and calls the
// WASI constructors in an `unsafe` block. The only other unsafe code is in
// `host/proxy.rs`: three hostcalls made directly rather than through SDK
// wrappers that allocate and panic (each block says why it is sound).

/// The VM's allocator: talc, taking memory from the module's linear memory
/// as it grows (which never shrinks, whichever allocator frees). A request
/// allocates a few times (its header buffer, its key, its RateLimit fields,
/// its access-log value), and talc does each for a fifth of what the
/// toolchain's dlmalloc costs the module.
#[cfg(target_family = "wasm")]
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

#[allow(unsafe_code)]
mod entry {
    use proxy_wasm::traits::RootContext;
    use proxy_wasm::types::LogLevel;

    proxy_wasm::main! {{
        proxy_wasm::set_log_level(LogLevel::Info);
        proxy_wasm::set_root_context(|id| -> Box<dyn RootContext> { Box::new(crate::root::Root::new(id, std::rc::Rc::new(crate::host::ProxyHost))) });
    }}
}
