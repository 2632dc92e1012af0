//! The fixed-window counter envoyproxy/ratelimit keeps in Redis: per request,
//! `INCRBY key hits` and `EXPIRE key window` for every descriptor, pipelined in
//! one round trip; over the limit when a counter passes it.
//!
//! The key is `<domain>_<entries>_<window start>`, as envoyproxy/ratelimit
//! builds it, except that the entries (a customer's key) are a keyed hash
//! (SipHash-1-3, 128 bits, a random key drawn at start): no customer key is in
//! clear in Redis. A restart draws another key and so starts every counter
//! afresh.

use std::hash::Hasher;
use std::io::Read;
use std::time::{SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use siphasher::sip128::{Hasher128, SipHasher13};

use crate::proto::{Code, Descriptor, RateLimitRequest};

/// The limit every descriptor is held to, and its window.
#[derive(Debug, Clone)]
pub struct Counter {
    conn: MultiplexedConnection,
    pub limit: u64,
    pub window_s: u64,
    hash_key: [u8; 16],
}

/// Why the counter could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("reading /dev/urandom for the key hash: {0}")]
    Random(#[from] std::io::Error),
    #[error("--window-seconds must be at least 1")]
    Window,
}

impl Counter {
    /// Connects to Redis at `url` (one connection, multiplexed).
    pub async fn connect(url: &str, limit: u64, window_s: u64) -> Result<Counter, StartError> {
        if window_s == 0 {
            return Err(StartError::Window);
        }
        let mut hash_key = [0u8; 16];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut hash_key)?;
        let conn = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        Ok(Counter {
            conn,
            limit,
            window_s,
            hash_key,
        })
    }

    /// One Redis round trip for all of `req`'s descriptors; OVER_LIMIT when
    /// any of their counters is past the limit.
    pub async fn check(&self, req: &RateLimitRequest) -> Result<Code, redis::RedisError> {
        if req.descriptors.is_empty() {
            return Ok(Code::Ok);
        }
        let hits = u64::from(req.hits_addend.max(1));
        let start = window_start(unix_seconds(), self.window_s);
        let mut pipe = redis::pipe();
        for d in &req.descriptors {
            let key = redis_key(&req.domain, &self.hash_key, d, start);
            pipe.cmd("INCRBY").arg(&key).arg(hits);
            pipe.cmd("EXPIRE").arg(&key).arg(self.window_s).ignore();
        }
        let counts: Vec<u64> = pipe.query_async(&mut self.conn.clone()).await?;
        Ok(verdict(&counts, self.limit))
    }
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The start of the fixed window `now` falls in.
pub fn window_start(now: u64, window_s: u64) -> u64 {
    now - now % window_s.max(1)
}

/// OVER_LIMIT when any counter is past `limit`.
pub fn verdict(counts: &[u64], limit: u64) -> Code {
    match counts.iter().any(|c| *c > limit) {
        true => Code::OverLimit,
        false => Code::Ok,
    }
}

/// `<domain>_<hash of the entries>_<window start>`. Each key and value goes
/// into the hash behind its length, so no two entry lists share an input.
pub fn redis_key(domain: &str, hash_key: &[u8; 16], entries: &Descriptor, start: u64) -> String {
    let mut h = SipHasher13::new_with_key(hash_key);
    for (k, v) in entries {
        h.write_u64(k.len() as u64);
        h.write(k);
        h.write_u64(v.len() as u64);
        h.write(v);
    }
    format!("{domain}_{:032x}_{start}", h.finish128().as_u128())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(pairs: &[(&str, &str)]) -> Descriptor {
        pairs
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn the_key_names_domain_and_window_but_not_the_customer_key() {
        let key = redis_key("bench", &[7; 16], &entries(&[("key", "alice")]), 120);
        assert!(key.starts_with("bench_") && key.ends_with("_120"), "{key}");
        assert!(!key.contains("alice") && !key.contains("key_"), "{key}");
        assert_eq!(key.len(), "bench_".len() + 32 + "_120".len());
    }

    #[test]
    fn distinct_entries_and_hash_keys_give_distinct_keys() {
        let k = |pairs: &[(&str, &str)], hk: u8| redis_key("d", &[hk; 16], &entries(pairs), 0);
        assert_ne!(k(&[("ab", "c")], 1), k(&[("a", "bc")], 1));
        assert_ne!(k(&[("a", "b")], 1), k(&[("a", "b")], 2));
        assert_eq!(k(&[("a", "b")], 1), k(&[("a", "b")], 1));
    }

    #[test]
    fn windows_are_fixed_and_over_limit_is_past_the_limit() {
        assert_eq!(window_start(125, 60), 120);
        assert_eq!(window_start(125, 1), 125);
        assert_eq!(verdict(&[3, 5], 5), Code::Ok);
        assert_eq!(verdict(&[3, 6], 5), Code::OverLimit);
        assert_eq!(verdict(&[], 0), Code::Ok);
    }
}
