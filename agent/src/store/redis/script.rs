//! The one Lua script of the Redis stores: a token-bucket lease, atomic per key,
//! on the Redis server's clock. Rate, burst and the region's share travel as ARGV
//! with every call, so a rules change needs no script reload and no counter reset.

use meshlimit_core::Take;
use redis::Value;

use crate::store::StoreError;

/// Token-bucket lease, constant time: one HMGET, then at most one HSET and one
/// PEXPIRE.
///
/// - `KEYS[1]`: the bucket, a hash `{t = tokens, u = last update}` (µs of `TIME`).
///   Every key carries a hash tag, so the script touches one slot.
/// - `ARGV[1]`: requests per period; `ARGV[2]`: the period in ms;
///   `ARGV[3]`: burst; `ARGV[4]`: the least tokens to grant (the request's cost);
///   `ARGV[5]`: the most (the lease size); `ARGV[6]`: the share of the limit this
///   region enforces (1 for region-scoped rules).
/// - Returns `{granted, retry_after_us, remaining, reset_us}`; `granted = 0` is a
///   denial, which writes nothing.
pub const LEASE_SCRIPT: &str = r"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local share = tonumber(ARGV[6])
local rate = tonumber(ARGV[1]) * share / (tonumber(ARGV[2]) * 1000)
local burst = math.max(1, math.floor(tonumber(ARGV[3]) * share))
local min = tonumber(ARGV[4])
local max = tonumber(ARGV[5])
local state = redis.call('HMGET', KEYS[1], 't', 'u')
local tokens = tonumber(state[1]) or burst
local updated = tonumber(state[2]) or now
local elapsed = now - updated
if elapsed < 0 then elapsed = 0 end
tokens = math.min(burst, tokens + elapsed * rate)
if tokens + 1e-9 < min then
  return {0, math.max(1, math.ceil((math.min(min, burst) - tokens) / rate)), math.floor(tokens), 0}
end
local granted = math.max(min, math.min(max, math.floor(tokens + 1e-9)))
tokens = math.max(0, tokens - granted)
local reset = math.ceil((burst - tokens) / rate)
redis.call('HSET', KEYS[1], 't', string.format('%.6f', tokens), 'u', string.format('%.0f', now))
redis.call('PEXPIRE', KEYS[1], math.ceil(reset / 1000) + 1000)
return {granted, 0, math.floor(tokens), reset}
";

/// The script's SHA1, for EVALSHA.
pub fn sha() -> String {
    redis::Script::new(LEASE_SCRIPT).get_hash().to_string()
}

/// Reads the script's reply.
pub fn parse_reply(value: &Value) -> Result<Take, StoreError> {
    let Value::Array(items) = value else {
        return Err(StoreError::Failed(format!(
            "lease script: unexpected reply {value:?}"
        )));
    };
    let int = |i: usize| match items.get(i) {
        Some(Value::Int(n)) => u64::try_from(*n).ok(),
        _ => None,
    };
    let (Some(granted), Some(retry_us), Some(remaining), Some(reset_us)) =
        (int(0), int(1), int(2), int(3))
    else {
        return Err(StoreError::Failed(format!(
            "lease script: unexpected reply {value:?}"
        )));
    };
    Ok(if granted == 0 {
        Take::Denied {
            retry_after_ns: retry_us.saturating_mul(1_000),
        }
    } else {
        Take::Granted {
            tokens: u32::try_from(granted).unwrap_or(u32::MAX),
            remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
            reset_ns: reset_us.saturating_mul(1_000),
        }
    })
}

/// Agent heartbeat, on the server's clock.
///
/// - `KEYS[1]`: the region's agents, a sorted set scored by last heartbeat (ms).
/// - `ARGV[1]`: this agent's id; `ARGV[2]`: how long a heartbeat counts (ms).
/// - Returns how many agents beat within that window, this one included.
pub const HEARTBEAT_SCRIPT: &str = r"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local window = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('PEXPIRE', KEYS[1], window * 2)
return redis.call('ZCARD', KEYS[1])
";

/// The sorted set of the region's agents (one slot, whatever the cluster).
pub const AGENTS_KEY: &str = "ml:{agents}";
/// An agent not heard from for this long no longer counts as live.
pub const HEARTBEAT_WINDOW_MS: u64 = 5_000;
