//! meshlimit-core: everything the filter (inside Envoy, as WebAssembly) and the agent
//! must agree on. No I/O, no clock, no async: time is always a `now_ns` argument
//! (nanoseconds on whatever monotonic or wall clock the caller uses, consistently).
//!
//! `unwrap`, `expect` and `panic!` are denied by the workspace lints: this code runs
//! inside Envoy's Wasm VM, where a panic traps the whole VM, not one request.
//! `unsafe` is denied too, but for one block: [`text::utf8`] reads bytes it
//! has checked are ASCII as text.

pub mod authority;
pub mod bucket;
pub mod client_ip;
pub mod counter;
pub mod decision;
pub mod digits;
pub mod fingerprint;
pub mod header_list;
pub mod headers;
pub mod key;
pub mod lease;
pub mod limit;
pub mod log_line;
pub mod metadata;
pub mod path;
pub mod policy;
pub mod pool_entry;
pub mod printable;
pub mod query;
pub mod rules;
pub mod secret;
pub mod slot;
pub mod stack_text;
pub mod text;
pub mod window;
pub mod wire;

#[cfg(test)]
mod testing;

pub use bucket::{Bucket, Take};
pub use counter::Counter;
pub use decision::{Outcome, RuleVerdict, Verdict};
pub use key::DescriptorKey;
pub use limit::{Algorithm, Limit};
pub use rules::{RequestInfo, RuleSet};
pub use window::Window;

/// Nanoseconds per second, for converting periods and retry times.
pub const NANOS_PER_SEC: u64 = 1_000_000_000;
/// Nanoseconds per millisecond.
pub const NANOS_PER_MS: u64 = 1_000_000;
