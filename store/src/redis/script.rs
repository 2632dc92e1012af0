//! Every Lua script the agent runs in Redis, here and nowhere else, each with what
//! it does, its `KEYS` and `ARGV`, and its reply (key names: [`super::keys`]):
//!
//! - [`LEASE_SCRIPT`]: the lease (token bucket, fixed or sliding window), atomic per key, on the Redis
//!   server's clock ([`LEASE_SCRIPT_AT`] is its test form, the clock from ARGV);
//! - [`PEEK_SCRIPT`]: a bucket or window read as it is, with the server's clock;
//! - [`HEARTBEAT_SCRIPT`]: an agent says it is alive and learns how many are;
//! - [`FLUSH_SCRIPT`], [`SEAL_SCRIPT`]: the region exchange's demand;
//! - [`ELECT_SCRIPT`], [`RELEASE_SCRIPT`]: the election of a region's rebalancer;
//! - [`TRIAL_SCRIPT`], [`TRIAL_CONTROL_SCRIPT`]: a rules change's trial in shadow;
//! - [`CONTROL_GET_SCRIPT`], [`CONTROL_HGET_SCRIPT`], [`OVERRIDE_SET_SCRIPT`],
//!   [`VERSIONS_SCRIPT`], [`AUDIT_READ_SCRIPT`]: the rest of the control state
//!   (`super::super::control`): values read only within their size cap, each
//!   change written with its audit entry in one step.
//!
//! Every script touches the keys of one hash slot (each call's keys share a hash
//! tag), so each runs on a Redis Cluster as on a single Redis. Rate, burst and
//! the region's share, and the algorithm, travel as ARGV with every lease, so a rules change needs
//! no script reload and no counter reset.

use meshlimit_core::Take;
use redis::Value;

use crate::StoreError;

/// The lease script's body, after `now` (µs) is known; see [`LEASE_SCRIPT`].
/// One text for the production script and the test one ([`LEASE_SCRIPT_AT`]),
/// so that they cannot drift.
macro_rules! lease_body {
    () => {
        r"
local requests = tonumber(ARGV[1])
local period_ms = tonumber(ARGV[2])
local share = tonumber(ARGV[6])
local min = tonumber(ARGV[4])
local max = tonumber(ARGV[5])
local function finite(x) return x ~= nil and x == x and x > -math.huge and x < math.huge end
local algorithm = ARGV[7]
if not (finite(requests) and finite(period_ms) and finite(tonumber(ARGV[3])) and finite(share)
    and finite(min) and finite(max) and requests > 0 and period_ms > 0 and share > 0
    and tonumber(ARGV[3]) >= 1 and min >= 1 and max >= 1
    and (algorithm == 'token_bucket' or algorithm == 'fixed_window' or algorithm == 'sliding_window')) then
  return redis.error_reply('ERR lease script: bad arguments')
end
if algorithm ~= 'token_bucket' then
  -- A window of `per` (µs), aligned to the epoch of the server's clock: window
  -- `index` runs from index × per to (index + 1) × per. The hash holds
  -- {w = window index, c = its count, p = the previous window's count}.
  local per = period_ms * 1000
  local limit = math.max(1, math.floor(requests * share))
  local sliding = algorithm == 'sliding_window'
  local index = math.floor(now / per)
  if index * per > now then index = index - 1 elseif (index + 1) * per <= now then index = index + 1 end
  local state = redis.call('HMGET', KEYS[1], 'w', 'c', 'p')
  local w, c, p = tonumber(state[1]), tonumber(state[2]), tonumber(state[3])
  local count, previous, latest = 0, 0, index
  -- Missing or corrupt counts (not whole, negative, not numbers) are nothing
  -- counted: at most one window's limit is granted for them.
  local function whole(x) return finite(x) and x >= 0 and x == math.floor(x) end
  if whole(w) and whole(c) and whole(p) then
    if w == index then count, previous = c, p
    elseif w == index - 1 then previous = c
    elseif w > index then
      -- A clock that stepped back: the latest window's counts stay in force.
      count, previous, latest = c, p, w
    end
  end
  local elapsed = now - index * per
  local to_end = per - elapsed
  local used = count
  if sliding then used = previous * ((per - elapsed) / per) + count end
  if used + min > limit + 1e-9 then
    local retry = nil
    if sliding then
      local cost = math.min(min, limit)
      local room = limit - cost - count
      if room >= -1e-9 and previous > 0 then
        local t = to_end - math.max(0, room) * per / previous
        if t < to_end then retry = math.ceil(math.max(1, t)) end
      end
      if retry == nil then
        local s = 0
        if count > 0 then s = math.max(0, per - math.max(0, limit - cost) * per / count) end
        retry = math.ceil(math.max(1, to_end + s))
      end
    else
      retry = math.max(1, to_end)
    end
    return {0, retry, math.floor(math.max(0, limit - used)), 0}
  end
  local granted = math.max(min, math.min(max, math.floor(limit - used + 1e-9)))
  local left = math.max(0, math.floor(limit - used - granted + 1e-9))
  local reset = math.max(1, to_end)
  if sliding then reset = reset + per end
  redis.call('HSET', KEYS[1], 'w', string.format('%.0f', latest), 'c', string.format('%.0f', count + granted),
    'p', string.format('%.0f', previous))
  redis.call('PEXPIRE', KEYS[1], string.format('%d', math.ceil(reset / 1000) + 1000))
  return {granted, 0, left, reset}
end
local rate = requests * share / (period_ms * 1000)
local burst = math.max(1, math.floor(tonumber(ARGV[3]) * share))
-- Nothing the script returns or stores exceeds this (µs): an expiry, a reset
-- or a retry. Rules refill a full burst within 366 days (the rules compiler).
local cap = 400 * 86400 * 1000000
local state = redis.call('HMGET', KEYS[1], 't', 'u')
local tokens = tonumber(state[1])
local updated = tonumber(state[2])
local repaired = false
if state[1] == false and state[2] == false then
  -- An unseen (or expired) key: a full bucket.
  tokens, updated = burst, now
elseif not (finite(tokens) and finite(updated) and tokens >= 0 and tokens <= burst and updated >= 0) then
  -- Corrupt: a full bucket from now, written back whatever the answer, so
  -- at most one burst is ever granted for it. Tokens above the burst are also
  -- what a smaller burst (a rules change, a smaller share) leaves: full either way.
  tokens, updated, repaired = burst, now, true
elseif updated > now then
  -- Stamped in the future (a promoted replica, a clock step): refill from now,
  -- written back, or the key would be locked out until the clock caught up.
  updated, repaired = now, true
end
tokens = math.min(burst, tokens + (now - updated) * rate)
local function store()
  local ttl = math.ceil((burst - tokens) / rate / 1000) + 1000
  if not (ttl == ttl and ttl <= cap / 1000) then ttl = cap / 1000 end
  redis.call('HSET', KEYS[1], 't', string.format('%.6f', tokens), 'u', string.format('%.0f', now))
  redis.call('PEXPIRE', KEYS[1], string.format('%d', ttl))
end
if tokens + 1e-9 < min then
  if repaired then store() end
  local retry = math.min(cap, math.max(1, math.ceil((math.min(min, burst) - tokens) / rate)))
  return {0, retry, math.floor(tokens), 0}
end
local granted = math.max(min, math.min(max, math.floor(tokens + 1e-9)))
tokens = math.max(0, tokens - granted)
store()
return {granted, 0, math.floor(tokens), math.min(cap, math.ceil((burst - tokens) / rate))}
"
    };
}

/// The lease, constant time: one HMGET, then at most one HSET and one PEXPIRE;
/// a token bucket, a fixed window or a sliding window (core's `Bucket` and
/// `Window`, which a differential test holds it to).
///
/// - `KEYS[1]`: the key's state, a hash: for a token bucket `{t = tokens, u =
///   last update}` (µs of `TIME`); for a window `{w = window index (µs of
///   `TIME` ÷ period), c = its count, p = the previous window's count}`. Every key
///   carries a hash tag, so the script touches one hash slot.
/// - `ARGV[1]`: requests per period; `ARGV[2]`: the period in ms;
///   `ARGV[3]`: burst (ignored by a window, whose limit is `requests`);
///   `ARGV[4]`: the least tokens to grant (the request's cost);
///   `ARGV[5]`: the most (the lease size); `ARGV[6]`: the share of the limit this
///   region enforces (1 for region-scoped rules); `ARGV[7]`: the algorithm,
///   `token_bucket`, `fixed_window` or `sliding_window`.
/// - Returns `{granted, retry_after_us, remaining, reset_us}`; `granted = 0` is a
///   denial, which writes nothing (but for a repair, below).
///
/// Hostile or damaged state never locks a key out nor grants without bound: a
/// stamp in the future is clamped to the server's clock; a corrupt field (`nan`,
/// `inf`, text, negative tokens, tokens above the burst) is a full bucket stamped
/// now, written back at once, so at most one burst is granted for it. Bad ARGV is
/// an error before any write. The expiry is the time to refill a full burst plus
/// one second, capped at 400 days, and always a whole number of ms, so PEXPIRE
/// cannot fail after the HSET (a failure there would leave a key without expiry:
/// Redis does not roll a script back). A window's state expires one second after
/// its counts stop weighing: the window's end (fixed) or the next one's (sliding);
/// missing or corrupt counts are nothing counted.
pub(crate) const LEASE_SCRIPT: &str = concat!(
    "local clock = redis.call('TIME')\n",
    "local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])\n",
    lease_body!()
);

/// Tests only: [`LEASE_SCRIPT`] with `now` (µs) taken from `ARGV[8]` instead of
/// the server's `TIME`, so a test can drive the clock. The agent never sends it.
#[doc(hidden)]
pub const LEASE_SCRIPT_AT: &str = concat!("local now = tonumber(ARGV[8])\n", lease_body!());

/// The script's SHA1, for EVALSHA.
pub(crate) fn sha() -> String {
    redis::Script::new(LEASE_SCRIPT).get_hash().to_string()
}

/// Reads the script's reply.
pub(crate) fn parse_reply(value: &Value) -> Result<Take, StoreError> {
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

/// Unspent tokens handed back to a token bucket (an agent stopping with
/// tokens pooled), on the server's clock, atomic: the bucket is refilled up
/// to now as the lease script would, then takes whole tokens up to its burst.
/// Constant time: one HMGET, at most one HSET and one PEXPIRE.
///
/// - `KEYS[1]`: the bucket (as [`LEASE_SCRIPT`]'s).
/// - `ARGV[1]`: requests per period; `ARGV[2]`: the period in ms; `ARGV[3]`:
///   burst; `ARGV[4]`: the share of the limit this region enforces (as the
///   lease script's, so the cap is the same burst); `ARGV[5]`: the tokens.
/// - Returns the tokens the bucket took. An absent key is a full bucket, and
///   a key without bucket fields (a window's counts) or with corrupt ones is
///   left as it is (the lease script repairs it): they take none. Bad ARGV is
///   an error before any write.
pub(crate) const GIVE_BACK_SCRIPT: &str = r"
local requests = tonumber(ARGV[1])
local period_ms = tonumber(ARGV[2])
local share = tonumber(ARGV[4])
local n = tonumber(ARGV[5])
local function finite(x) return x ~= nil and x == x and x > -math.huge and x < math.huge end
if not (finite(requests) and finite(period_ms) and finite(tonumber(ARGV[3])) and finite(share)
    and finite(n) and requests > 0 and period_ms > 0 and share > 0 and tonumber(ARGV[3]) >= 1
    and n >= 0) then
  return redis.error_reply('ERR give-back script: bad arguments')
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local rate = requests * share / (period_ms * 1000)
local burst = math.max(1, math.floor(tonumber(ARGV[3]) * share))
local state = redis.call('HMGET', KEYS[1], 't', 'u')
local tokens, updated = tonumber(state[1]), tonumber(state[2])
if not (finite(tokens) and finite(updated) and tokens >= 0 and tokens <= burst and updated >= 0) then
  return 0
end
if updated > now then updated = now end
tokens = math.min(burst, tokens + (now - updated) * rate)
local taken = math.max(0, math.min(math.floor(n), math.floor(burst - tokens + 1e-9)))
if taken == 0 then return 0 end
tokens = tokens + taken
local ttl = math.ceil((burst - tokens) / rate / 1000) + 1000
local cap = 400 * 86400 * 1000
if not (ttl == ttl and ttl <= cap) then ttl = cap end
redis.call('HSET', KEYS[1], 't', string.format('%.6f', tokens), 'u', string.format('%.0f', now))
redis.call('PEXPIRE', KEYS[1], string.format('%d', ttl))
return taken
";

/// Agent heartbeat, on the server's clock: records this agent's beat, forgets
/// agents not heard from within the window.
///
/// - `KEYS[1]`: the region's agents ([`super::keys::AGENTS`]), a sorted set
///   scored by last heartbeat (ms of the server's `TIME`).
/// - `ARGV[1]`: this agent's id; `ARGV[2]`: how long a heartbeat counts (ms).
/// - Returns how many agents beat within that window, this one included; the
///   set expires after two windows without a beat.
pub(crate) const HEARTBEAT_SCRIPT: &str = r"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local window = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('PEXPIRE', KEYS[1], window * 2)
return redis.call('ZCARD', KEYS[1])
";

/// The region exchange, agents: adds a partition's demand for a period into the
/// period's demand or, once the period is sealed, into the next period's, so a
/// late flush moves demand by a period instead of losing it.
///
/// - `KEYS[1]`: the period's demand ([`super::keys::region::demand`]);
///   `KEYS[2]`: the period's sealed marker ([`super::keys::region::marker`]);
///   `KEYS[3]`: the next period's demand.
/// - `ARGV[1]`: the demand's life in ms; then `exchange key, tokens` pairs
///   (HINCRBY into the target hash).
/// - Returns 1 when the demand went to the period asked, 0 when to the next one.
pub const FLUSH_SCRIPT: &str = "local target = KEYS[1] \
     if redis.call('EXISTS', KEYS[2]) == 1 then target = KEYS[3] end \
     for i = 2, #ARGV, 2 do redis.call('HINCRBY', target, ARGV[i], ARGV[i + 1]) end \
     redis.call('PEXPIRE', target, ARGV[1]) \
     if target == KEYS[1] then return 1 end return 0";

/// The region exchange, the region's leader: seals a partition's demand for a
/// period. Marks the period sealed, then renames its demand to the sealed name
/// (keeping the demand's expiry), if there was any.
///
/// - `KEYS[1]`: the period's demand ([`super::keys::region::demand`]);
///   `KEYS[2]`: the sealed demand ([`super::keys::region::sealed`]);
///   `KEYS[3]`: the period's sealed marker ([`super::keys::region::marker`]).
/// - `ARGV[1]`: the marker's life in ms.
/// - Returns 1 when there was demand to seal, 0 otherwise.
pub const SEAL_SCRIPT: &str = "redis.call('SET', KEYS[3], '1', 'PX', ARGV[1]) \
     if redis.call('EXISTS', KEYS[1]) == 1 then \
     redis.call('RENAME', KEYS[1], KEYS[2]) return 1 end return 0";

/// The election of a region's rebalancer: takes the lock if free, renews it
/// if this agent holds it, leaves it alone otherwise.
///
/// - `KEYS[1]`: the lock ([`super::keys::region::LOCK`]), a string holding the
///   leader's id.
/// - `ARGV[1]`: this agent's id; `ARGV[2]`: the lock's life in ms.
/// - Returns the holder's id after the call (this agent's when it leads).
pub const ELECT_SCRIPT: &str = "local cur = redis.call('GET', KEYS[1]) \
     if cur == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return cur end \
     if not cur then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return ARGV[1] end \
     return cur";

/// The election, on shutdown: deletes the lock if this agent holds it, so the
/// next leader need not wait for it to expire.
///
/// - `KEYS[1]`: the lock ([`super::keys::region::LOCK`]).
/// - `ARGV[1]`: this agent's id.
/// - Returns 1 when the lock was deleted, 0 when another agent (or none) held it.
pub const RELEASE_SCRIPT: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
     return redis.call('DEL', KEYS[1]) end return 0";

/// A key's counts read without changing them (`GET /v1/explain`). KEYS[1]: the
/// key (`ml:{<key id>}:<rule>`). Reply: `{tokens, updated µs, now s, now µs,
/// window, count, previous}`, a field an empty string when the key does not
/// hold it (a bucket has no window fields, a window no tokens; a key the store
/// does not hold is a full bucket or an empty window).
pub(crate) const PEEK_SCRIPT: &str = r"
local s = redis.call('HMGET', KEYS[1], 't', 'u', 'w', 'c', 'p')
local t = redis.call('TIME')
return {s[1] or '', s[2] or '', t[1], t[2], s[3] or '', s[4] or '', s[5] or ''}
";

/// Starts (unless started) and reads the trial of a rules version, every field
/// size-checked before it is sent. KEYS: the trial's hash, the last-trial
/// pointer, the audit history. ARGV: `1` to answer the plan, the cap of a
/// field and of the plan (bytes); then, to start one (`ARGV[4]` not empty):
/// `start_ms` (the server's time, as a read answered it), `period_ms`, the
/// plan's JSON, its MAC, the record's MAC, the sealed pointer, the record's
/// life (ms), the sealed audit entry, the audit entries kept. Starting is
/// `HSETNX start_ms`: the first agent's start and plan stay, and only it
/// appends to the history. Reply: the server's time (ms), `ok` (or `big`: a
/// field over its cap, nothing more), then `start_ms`, `period_ms`,
/// `ended_ms`, `held`, `plan_mac`, `mac`, `control_mac`, `plan` (nil where
/// absent or not asked for).
pub(crate) const TRIAL_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if ARGV[4] ~= '' and redis.call('HSETNX', KEYS[1], 'start_ms', ARGV[4]) == 1 then
  redis.call('HSET', KEYS[1], 'period_ms', ARGV[5], 'plan', ARGV[6], 'plan_mac', ARGV[7], 'mac', ARGV[8])
  redis.call('PEXPIRE', KEYS[1], ARGV[10])
  redis.call('SET', KEYS[2], ARGV[9])
  redis.call('LPUSH', KEYS[3], ARGV[11])
  redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[12]) - 1)
end
local fields = {'start_ms', 'period_ms', 'ended_ms', 'held', 'plan_mac', 'mac', 'control_mac'}
for _, f in ipairs(fields) do
  if redis.call('HSTRLEN', KEYS[1], f) > tonumber(ARGV[2]) then return {now, 'big'} end
end
local v = redis.call('HMGET', KEYS[1], unpack(fields))
local plan = false
if ARGV[1] == '1' then
  if redis.call('HSTRLEN', KEYS[1], 'plan') > tonumber(ARGV[3]) then return {now, 'big'} end
  plan = redis.call('HGET', KEYS[1], 'plan')
end
return {now, 'ok', v[1], v[2], v[3], v[4], v[5], v[6], v[7], plan}
";

/// Ends or holds a trial: sets its control fields as given, with their MAC,
/// if the trial is still the one read (its `start_ms`), and appends to the
/// audit history. KEYS: the trial's hash, the audit history. ARGV: the
/// `start_ms` read, `ended_ms` and `held` (`""`: none), their MAC, `end` or
/// `hold`, how long to keep an ended record (ms), the sealed audit entry, the
/// audit entries kept. `end` keeps the record that long; `hold` keeps it until
/// ended. Reply: 1, or 0 when there is no such trial.
pub(crate) const TRIAL_CONTROL_SCRIPT: &str = r"
if redis.call('HGET', KEYS[1], 'start_ms') ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('HDEL', KEYS[1], 'ended_ms') else redis.call('HSET', KEYS[1], 'ended_ms', ARGV[2]) end
if ARGV[3] == '' then redis.call('HDEL', KEYS[1], 'held') else redis.call('HSET', KEYS[1], 'held', ARGV[3]) end
redis.call('HSET', KEYS[1], 'control_mac', ARGV[4])
if ARGV[5] == 'end' then redis.call('PEXPIRE', KEYS[1], ARGV[6]) else redis.call('PERSIST', KEYS[1]) end
redis.call('LPUSH', KEYS[2], ARGV[7])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[8]) - 1)
return 1
";

/// A control string (the fleet override, the last-trial pointer) read only
/// when within its cap. KEYS: the string. ARGV: the cap (bytes). Reply: `{}`
/// when absent (or empty), `{'big'}` over the cap, else `{'ok', value}`.
pub(crate) const CONTROL_GET_SCRIPT: &str = r"
local n = redis.call('STRLEN', KEYS[1])
if n == 0 then return {} end
if n > tonumber(ARGV[1]) then return {'big'} end
return {'ok', redis.call('GET', KEYS[1])}
";

/// Fields of a control hash (the versions served) read only when each is
/// within the cap. KEYS: the hash. ARGV: the cap (bytes), then the fields.
/// Reply: `{'big'}` when one is over the cap, else `{'ok', values…}` (nil
/// where absent).
pub(crate) const CONTROL_HGET_SCRIPT: &str = r"
for i = 2, #ARGV do
  if redis.call('HSTRLEN', KEYS[1], ARGV[i]) > tonumber(ARGV[1]) then return {'big'} end
end
local v = redis.call('HMGET', KEYS[1], unpack(ARGV, 2))
return {'ok', unpack(v)}
";

/// Sets (or, given `""`, deletes) the fleet override and appends to the audit
/// history, in one step. KEYS: the override, the audit history. ARGV: the
/// sealed override, the sealed audit entry, the audit entries kept. Reply: 1.
pub(crate) const OVERRIDE_SET_SCRIPT: &str = r"
if ARGV[1] == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[1]) end
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
return 1
";

/// Records the versions served, and appends to the audit history, unless the
/// same are recorded already (every agent of the region records them at a
/// rollout: one entry, not one per agent). KEYS: the versions' hash, the audit
/// history. ARGV: `current`, `previous`, their MAC, the sealed audit entry,
/// the audit entries kept. Reply: 1 when recorded, 0 when already there.
pub(crate) const VERSIONS_SCRIPT: &str = r"
local v = redis.call('HMGET', KEYS[1], 'current', 'previous', 'mac')
if v[1] == ARGV[1] and v[2] == ARGV[2] and v[3] == ARGV[3] then return 0 end
redis.call('HSET', KEYS[1], 'current', ARGV[1], 'previous', ARGV[2], 'mac', ARGV[3])
redis.call('LPUSH', KEYS[2], ARGV[4])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[5]) - 1)
return 1
";

/// The newest audit entries. KEYS: the audit history. ARGV: how many, the cap
/// of one (bytes). Reply: the entries, newest first, one over the cap as `""`.
pub(crate) const AUDIT_READ_SCRIPT: &str = r"
local out = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
for i, e in ipairs(out) do
  if #e > tonumber(ARGV[2]) then out[i] = '' end
end
return out
";
