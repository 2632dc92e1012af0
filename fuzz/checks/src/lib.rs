//! The bodies of meshlimit's fuzz targets: one `pub fn` per target, taking the
//! fuzzer's bytes, calling `meshlimit-core` (or the agent's importers) on them
//! as an attacker would, and checking the invariants the security review
//! relies on. cargo-fuzz (`fuzz/`,
//! nightly) calls them from `fuzz/fuzz_targets/<name>.rs`; `tests/replay.rs`
//! feeds them every committed corpus file on stable, in `cargo test`.
//!
//! Inputs are split by hand ([`Input`]), without `arbitrary`, so the byte
//! formats below are stable and corpus files stay meaningful across releases.

// A failed invariant must crash the fuzzer (and fail the replay test): that is
// the whole point of this crate, so the workspace's no-panic lints, meant for
// code running inside Envoy, do not apply here.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]
#![forbid(unsafe_code)]

use std::fmt::Debug;

use meshlimit_cli::args::ImportFormat;
use meshlimit_core::bucket::{Bucket, Take};
use meshlimit_core::key::MAX_PART_LEN;
use meshlimit_core::rules::{parse_rules, RuleSet, RulesConfig};
use meshlimit_core::slot::{LocalCheck, SlotState, MAX_LEASE_TTL_NS};
use meshlimit_core::wire::{LeaseRequest, LeaseResponse, SyncRequest, SyncResponse};
use meshlimit_core::{client_ip, path, DescriptorKey, Limit};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// A target's body: panics when an invariant fails.
pub type Check = fn(&[u8]);

/// Every target, by the name of its fuzz target and corpus directory.
pub const TARGETS: &[(&str, Check)] = &[
    ("rules_parser", rules_parser),
    ("lease_decoder", lease_decoder),
    ("sync_decoder", sync_decoder),
    ("slot_decoder", slot_decoder),
    ("descriptor_key", descriptor_key),
    ("client_ip", client_ip),
    ("path_normalize", path_normalize),
    ("import_envoy_ratelimit", import_envoy_ratelimit),
    ("import_limitador", import_limitador),
];

/// The check function of target `name`.
pub fn target(name: &str) -> Option<Check> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// A cursor over the fuzzer's bytes. Reading past the end yields zeros and empty
/// slices, so every input is valid and short inputs mean "mostly zero".
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, tail) = self.data.split_at(n.min(self.data.len()));
        self.data = tail;
        head
    }

    pub fn u8(&mut self) -> u8 {
        self.bytes(1).first().copied().unwrap_or(0)
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let b = self.bytes(N);
        out[..b.len()].copy_from_slice(b);
        out
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    /// A length-prefixed byte string: one length byte, or 0xFF then a u16
    /// length (so parts longer than [`MAX_PART_LEN`] are reachable).
    pub fn part(&mut self) -> &'a [u8] {
        let len = match self.u8() {
            0xFF => usize::from(self.u16()),
            n => usize::from(n),
        };
        self.bytes(len)
    }

    pub fn rest(&mut self) -> &'a [u8] {
        self.bytes(self.data.len())
    }
}

// ---- rules_parser

/// Arbitrary UTF-8 as a rules file. A file that compiles must survive the trip
/// the agent makes it take to a filter: `config()` as JSON, parsed and compiled
/// again (as the filter does, and as a rules file), with the same version.
pub fn rules_parser(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(set) = parse_rules("fuzz.yaml", text) else {
        return;
    };
    // The agent's sets keep the normalised config they serve.
    let served = set
        .config()
        .expect("a parsed set keeps its config to serve");
    let json = serde_json::to_string(served).expect("a compiled config serialises");
    let config: RulesConfig = serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("config JSON does not parse back: {e}\n{json}"));
    assert_eq!(&config, served, "config JSON round trip\n{json}");
    let again = RuleSet::compile(&config)
        .unwrap_or_else(|e| panic!("a compiled config does not compile again: {e}\n{json}"));
    assert_eq!(again.version(), set.version(), "version changed\n{json}");
    let reparsed = parse_rules("fuzz.json", &json)
        .unwrap_or_else(|e| panic!("config JSON is not a valid rules file: {e}\n{json}"));
    assert_eq!(reparsed.version(), set.version(), "version changed\n{json}");
    assert_eq!(reparsed.rules().len(), set.rules().len());
}

// ---- lease_decoder, sync_decoder

/// A decoded value encodes to JSON that decodes to an equal value, and encodes
/// the same way again.
fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(data: &[u8]) -> Option<T> {
    let value: T = serde_json::from_slice(data).ok()?;
    let json = serde_json::to_vec(&value).expect("a decoded value encodes");
    let again: T = serde_json::from_slice(&json).unwrap_or_else(|e| {
        panic!(
            "re-encoded value does not decode: {e}\n{}",
            String::from_utf8_lossy(&json)
        )
    });
    assert_eq!(again, value, "{}", String::from_utf8_lossy(&json));
    assert_eq!(serde_json::to_vec(&again).expect("encodes"), json);
    Some(value)
}

/// Lease bodies: what the agent reads from a filter, and the filter from the
/// agent. The filter's own reader of answers takes nothing serde_json does
/// not, and reads what it takes as serde_json does.
pub fn lease_decoder(data: &[u8]) {
    round_trip::<LeaseRequest>(data);
    let answer = round_trip::<LeaseResponse>(data);
    if let Ok(read) = meshlimit_core::wire::read_lease_response(data) {
        assert_eq!(
            Some(read),
            answer,
            "the filter's reader takes what serde_json refuses: {}",
            String::from_utf8_lossy(data)
        );
    }
}

/// Sync bodies; rules a sync response carries are compiled, as the filter does.
pub fn sync_decoder(data: &[u8]) {
    round_trip::<SyncRequest>(data);
    if let Some(SyncResponse {
        rules: Some(config),
        ..
    }) = round_trip::<SyncResponse>(data)
    {
        let _ = RuleSet::compile(&config);
    }
}

// ---- slot_decoder

/// Input: fingerprint (u64), now (u64), a limit (requests u32, per u64, burst
/// u32; zeros become 1), a mode byte choosing the slot's bytes (0: none, 1: a
/// length-prefixed blob, 2: the format byte followed by 89 raw bytes, 3: a
/// state built field by field and encoded, 4: like 3 but under the key's own
/// fingerprint), then operations (`check`, `grant`, `deny`, `fallback_take`,
/// `want`) with their arguments until the input ends.
pub fn slot_decoder(data: &[u8]) {
    let mut input = Input::new(data);
    let fingerprint = input.u64();
    let mut now = input.u64();
    let limit = Limit::new(
        input.u32().max(1).try_into().expect("non-zero"),
        input.u64().max(1).try_into().expect("non-zero"),
        input.u32().max(1).try_into().expect("non-zero"),
    );
    let template = SlotState::empty(0).encode();
    let bytes: Option<Vec<u8>> = match input.u8() % 5 {
        0 => None,
        1 => Some(input.part().to_vec()),
        2 => {
            let mut b = template.clone();
            let raw = input.bytes(template.len() - 1);
            b[1..1 + raw.len()].copy_from_slice(raw);
            Some(b)
        }
        mode => {
            let owner = if mode == 4 { fingerprint } else { input.u64() };
            let built = built_state(&mut input, owner).encode();
            if owner != fingerprint {
                // Another key's state: this key gets none of it.
                let mine = SlotState::claim(Some(&built), fingerprint, now);
                assert!(
                    mine.is_none_or(|s| s.encode() == SlotState::empty(fingerprint).encode()),
                    "inherited another key's state: {mine:?}"
                );
            }
            Some(built)
        }
    };

    // What a slot's bytes say is theirs to keep.
    let claimed = SlotState::claim(bytes.as_deref(), fingerprint, now);
    if let Some(bytes) = &bytes {
        check_one_owner(bytes, fingerprint, now);
    }
    let Some(mut state) = claimed else {
        return;
    };
    assert_eq!(
        state.fingerprint, fingerprint,
        "claimed another key's state"
    );
    check_round_trip(&state);

    // Tokens this key may spend: what its own slot held, plus every grant's
    // tokens beyond the cost of the request it answered.
    let mut budget = u64::from(state.lease.tokens);
    let mut taken: u64 = 0;
    let mut ops = 0;
    while !input.is_empty() && ops < 64 {
        ops += 1;
        let op = input.u8();
        // Time mostly moves forward a little; it may also step anywhere.
        now = if op & 0x80 != 0 {
            input.u64()
        } else {
            now.saturating_add(u64::from(input.u32()))
        };
        match op % 5 {
            0 => {
                let (cost, max_wait) = (input.u32(), input.u64());
                let flags = input.u8();
                let refill = (flags & 1 == 1).then(|| input.u64());
                let hold = flags & 2 == 2;
                match state.check(now, cost, max_wait, refill, hold) {
                    LocalCheck::Taken {
                        refill: started, ..
                    } => {
                        taken += u64::from(cost);
                        assert!(state.lease.expires_ns > now);
                        assert!(!started || refill.is_some(), "a refill nobody allowed");
                        assert!(
                            state.lease.expires_ns <= now.saturating_add(MAX_LEASE_TTL_NS),
                            "a lease outlives MAX_LEASE_TTL_NS: {state:?} at {now}"
                        );
                    }
                    LocalCheck::Denied { retry_after_ns } => {
                        assert!(retry_after_ns > 0);
                        assert!(
                            retry_after_ns <= max_wait,
                            "denied {retry_after_ns}ns, beyond max_wait {max_wait}"
                        );
                    }
                    LocalCheck::Held {
                        retry_after_ns,
                        refill: started,
                    } => {
                        assert!(retry_after_ns > 0 && retry_after_ns <= max_wait);
                        assert!(hold && refill.is_some(), "held where it may not be");
                        assert!(!started || state.lease.call_started_ns > 0);
                    }
                    LocalCheck::Miss { .. } => {}
                }
            }
            1 => {
                let (tokens, cost, ttl) = (input.u32(), input.u32(), input.u64());
                let (remaining, reset) = (input.u32(), input.u64());
                state.grant(now, tokens, cost, ttl, remaining, reset);
                budget += u64::from(tokens.saturating_sub(cost));
                assert!(state.lease.expires_ns <= now.saturating_add(MAX_LEASE_TTL_NS));
            }
            2 => state.deny(now, input.u64()),
            3 => {
                let cost = input.u32();
                if let Take::Granted { tokens, .. } = state.fallback_take(&limit, now, cost) {
                    assert!(tokens <= limit.burst(), "fail-local granted {tokens}");
                    assert_eq!(
                        tokens,
                        cost.max(1),
                        "fail-local granted {tokens} for {cost}"
                    );
                }
                let bucket = state.fallback.expect("fallback_take creates the bucket");
                assert!(bucket.tokens_at(&limit, now) <= f64::from(limit.burst()));
            }
            _ => {
                let _ = state.lease.want(input.u64(), input.u32());
                let _ = state.lease.next_ask(input.u32());
                if input.u8() & 1 == 1 {
                    state.begin_call(now, input.u64());
                } else {
                    state.call_failed();
                }
            }
        }
        assert!(
            u64::from(state.lease.tokens) + taken <= budget,
            "lease tokens {} + taken {taken} exceed what was granted ({budget})",
            state.lease.tokens
        );
        check_round_trip(&state);
    }
}

/// A state built from the input, field by field (the lease's hold through
/// `Lease::deny_after_tokens`, the only way to set it from outside core).
fn built_state(input: &mut Input, fingerprint: u64) -> SlotState {
    let mut s = SlotState::empty(fingerprint);
    s.lease.tokens = input.u32();
    s.lease.expires_ns = input.u64();
    s.store_remaining = input.u32();
    s.store_reset_at_ns = input.u64();
    s.lease.deny_after_tokens(0, input.u64());
    let has_fallback = input.u8() & 1 == 1;
    let (tokens, updated) = (f64::from_bits(input.u64()), input.u64());
    s.fallback = has_fallback.then(|| Bucket::from_parts(tokens, updated));
    s.lease.granted = input.u32();
    s.lease.granted_at_ns = input.u64();
    s.lease.demand_at_ns = input.u64();
    s.lease.demand = f32::from_bits(input.u32());
    s.fallback_full_ns = input.u64();
    s.lease.call_started_ns = input.u64();
    s.lease.call_deadline_ns = input.u64();
    s.lease.rtt_us = input.u32();
    s
}

/// At most one key finds anything in a slot: of two fingerprints claiming the
/// same bytes, one at least gets an empty state (or nothing, while the other's
/// fail-local bucket refills). So a colliding key never inherits another key's
/// lease tokens, denial or bucket.
fn check_one_owner(bytes: &[u8], fingerprint: u64, now: u64) {
    let other = fingerprint.wrapping_add(1);
    let found = |f: u64| {
        SlotState::claim(Some(bytes), f, now).is_some_and(|s| {
            assert_eq!(s.fingerprint, f, "claimed another key's state: {s:?}");
            s.encode() != SlotState::empty(f).encode()
        })
    };
    assert!(
        !(found(fingerprint) && found(other)),
        "two keys found state in one slot: {bytes:?}"
    );
}

/// encode → claim gives the same state back (compared as bytes: `demand`
/// may be NaN), at any time.
fn check_round_trip(state: &SlotState) {
    let bytes = state.encode();
    for now in [0, u64::MAX] {
        let back = SlotState::claim(Some(&bytes), state.fingerprint, now)
            .unwrap_or_else(|| panic!("own slot refused: {state:?}"));
        assert_eq!(back.encode(), bytes, "round trip changed {state:?}");
    }
}

// ---- descriptor_key

/// Input: a rule name (length byte, then bytes mapped onto [a-z0-9._-]), a
/// byte whose low 3 bits count list A's parts and next 3 bits list B's, then
/// the parts ([`Input::part`]); with bit 6 set, list B starts as a copy of A.
/// Different lists give different keys; keys are bounded; `rule()` is the rule.
pub fn descriptor_key(data: &[u8]) {
    const NAME_CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789._-";
    let mut input = Input::new(data);
    let name_len = usize::from(input.u8() % 64) + 1;
    let mut rule: String = input
        .bytes(name_len)
        .iter()
        .map(|b| char::from(NAME_CHARS[usize::from(*b) % NAME_CHARS.len()]))
        .collect();
    if rule.is_empty() {
        rule.push('r');
    }
    let counts = input.u8();
    let a: Vec<&[u8]> = (0..counts & 7).map(|_| input.part()).collect();
    let mut b: Vec<&[u8]> = if counts & 0x40 != 0 {
        a.clone()
    } else {
        Vec::new()
    };
    b.extend((0..(counts >> 3) & 7).map(|_| input.part()));

    let key_a = DescriptorKey::new(&rule, &a);
    let key_b = DescriptorKey::new(&rule, &b);
    for (key, parts) in [(&key_a, &a), (&key_b, &b)] {
        assert_eq!(key.rule(), rule, "{key}");
        assert_eq!(*key, DescriptorKey::new(&rule, parts.iter()));
        let bound = rule.len() + parts.len() * (1 + 3 * MAX_PART_LEN);
        assert!(
            key.as_str().len() <= bound,
            "{} > {bound}: {key}",
            key.as_str().len()
        );
        for part in parts.iter() {
            let one = DescriptorKey::new(&rule, [part]);
            let encoded = one.as_str().len() - rule.len() - 1;
            assert!(
                encoded <= 3 * MAX_PART_LEN,
                "part {part:?} is {encoded} bytes: {one}"
            );
        }
    }
    if a != b {
        assert_ne!(
            key_a, key_b,
            "two part lists, one key: {a:?} and {b:?} both give {key_a}"
        );
    }
}

// ---- client_ip

/// Input: a flags byte (bit 0: a downstream address, bit 1: an X-Forwarded-For
/// header), `trusted_hops` (one byte; 0xFF means u32::MAX), then text: the
/// downstream address up to the first newline, X-Forwarded-For after it.
pub fn client_ip(data: &[u8]) {
    let mut input = Input::new(data);
    let flags = input.u8();
    let hops = match input.u8() {
        0xFF => u32::MAX,
        n => u32::from(n),
    };
    let text = String::from_utf8_lossy(input.rest());
    let (downstream, xff) = text.split_once('\n').unwrap_or((&text, ""));
    let downstream = (flags & 1 != 0).then_some(downstream);
    let xff = (flags & 2 != 0).then_some(xff);

    let ip = client_ip::resolve(downstream, xff, hops);
    if let Some(ip) = &ip {
        let from_downstream = downstream.is_some_and(|d| d.contains(ip.as_str()));
        let from_xff = hops > 0 && xff.is_some_and(|x| x.contains(ip.as_str()));
        assert!(
            from_downstream || from_xff,
            "{ip:?} comes from neither {downstream:?} nor {xff:?}"
        );
    }
    // Without trusted hops, what the client wrote is never read.
    let alone = client_ip::resolve(downstream, None, 0);
    assert_eq!(client_ip::resolve(downstream, xff, 0), alone);
    assert_eq!(client_ip::resolve(downstream, Some("6.6.6.6"), 0), alone);
    if let Some(ip) = &alone {
        assert!(!ip.is_empty(), "empty client IP from {downstream:?}");
    }
}

// ---- path_normalize

/// Arbitrary bytes as a `:path`. The normal form is a fixed point, starts with
/// `/`, and holds no empty, `.` or `..` segment, no query, fragment or
/// parameters, and only printable ASCII.
pub fn path_normalize(data: &[u8]) {
    let once = path::normalize(data);
    assert_eq!(path::normalize(once.as_bytes()), once, "not idempotent");
    assert!(once.starts_with('/'), "{once:?}");
    assert!(!once.contains("//"), "{once:?}");
    assert!(once == "/" || !once.ends_with('/'), "{once:?}");
    assert!(!once.split('/').any(|s| s == "." || s == ".."), "{once:?}");
    assert!(!once.contains(['?', '#', ';', '\\']), "{once:?}");
    assert!(once.bytes().all(|b| b.is_ascii_graphic()), "{once:?}");
    assert!(once.len() <= 3 * data.len() + 1, "{once:?}");
}

// ---- import_envoy_ratelimit, import_limitador

/// The `--map`s an import input may give: bit `i` of its first two bytes
/// gives `MAPS[i]`.
const MAPS: [&str; 14] = [
    "user=header:x-user",
    "path=path",
    "method=method",
    "host=authority",
    "tier=header:x-tier",
    "k=query:k",
    "sub=claim:sub",
    "route=route",
    "cluster=cluster",
    "remote_address=client_ip",
    "generic_key:reports=path_prefix:/reports/",
    "generic_key:any=any",
    "tier:gold=header:x-gold=1",
    "m:get=method:GET",
];

/// Two bytes of `--map` choices, then arbitrary UTF-8 as the peer's file.
/// Import never panics, and a file it writes holds only comments, `version`
/// and `rules` at its top level, no hidden character, and reads back (as the
/// agent reads a rules file) as exactly the rules it compiled.
fn import(format: ImportFormat, data: &[u8]) {
    let mut input = Input::new(data);
    let chosen = input.u16();
    let maps: Vec<String> = MAPS
        .iter()
        .enumerate()
        .filter(|(i, _)| chosen & (1 << i) != 0)
        .map(|(_, m)| m.to_string())
        .collect();
    let Ok(text) = std::str::from_utf8(input.rest()) else {
        return;
    };
    let written = meshlimit_cli::import::written(format, text, &maps)
        .unwrap_or_else(|e| panic!("converted rules not written: {e}\n{text}"));
    let Some(written) = written else {
        return;
    };
    let out = &written.text;
    if let Some(c) = out
        .chars()
        .find(|c| *c != '\n' && meshlimit_core::printable::hidden(*c))
    {
        panic!("U+{:04X} written raw\n{out}", u32::from(c));
    }
    for line in out.lines() {
        assert!(
            line.starts_with(['#', ' ', '-']) || line == "version: 1" || line == "rules:",
            "a top-level line that is no rule: {line}\n{out}"
        );
    }
    let read = parse_rules("imported.yaml", out)
        .unwrap_or_else(|e| panic!("written rules do not parse: {e}\n{out}"));
    let compiled = RuleSet::compile(&written.config)
        .unwrap_or_else(|e| panic!("imported rules do not compile: {e}\n{out}"));
    assert_eq!(
        read.config(),
        compiled.config(),
        "read back otherwise\n{out}"
    );
    assert_eq!(read.version(), compiled.version(), "{out}");
}

pub fn import_envoy_ratelimit(data: &[u8]) {
    import(ImportFormat::EnvoyRatelimit, data);
}

pub fn import_limitador(data: &[u8]) {
    import(ImportFormat::Limitador, data);
}
