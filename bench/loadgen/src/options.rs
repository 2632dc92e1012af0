//! What to send, how fast and for how long. Loopback only: a benchmark tool that
//! can be pointed at any host is a denial-of-service tool.

use std::fmt::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where requests go: `http://127.0.0.1:PORT/path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub addr: SocketAddr,
    pub path: String,
}

/// Why options were refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum OptionsError {
    #[error("url `{0}`: expected http://127.0.0.1:PORT/PATH (loopback only)")]
    Url(String),
    #[error("header `{0}`: expected `name: value`")]
    Header(String),
    #[error("rate, duration and connections must be above zero")]
    Zero,
}

/// One run's settings.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub target: Target,
    /// Requests per second, on a fixed schedule.
    pub rate: f64,
    /// Measured time, after the warm-up.
    pub duration: Duration,
    /// Requests due in this first stretch are sent but not recorded.
    pub warmup: Duration,
    /// Keep-alive connections (at most one request in flight on each).
    pub connections: usize,
    /// A request that has no answer after this is an error.
    pub timeout: Duration,
    /// Sent with every request.
    pub headers: Vec<(String, String)>,
    /// A header whose value is unique to each request (`<run>-<seq>`).
    pub unique_header: Option<String>,
    /// With `unique_header`: draw its value from this many keys instead
    /// (`k<n>`, request `seq` taking key `seq × a prime mod keys`), so a key
    /// comes back every `keys` requests, spread over the run.
    pub keys: Option<u64>,
    run_id: String,
}

impl Target {
    /// Parses `http://127.0.0.1:PORT[/path]`.
    pub fn parse(url: &str) -> Result<Target, OptionsError> {
        let bad = || OptionsError::Url(url.to_string());
        let rest = url.strip_prefix("http://").ok_or_else(bad)?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = authority.rsplit_once(':').ok_or_else(bad)?;
        let ip: Ipv4Addr = host.parse().map_err(|_| bad())?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        if !ip.is_loopback() || port == 0 || path.contains(char::is_whitespace) {
            return Err(bad());
        }
        Ok(Target {
            addr: SocketAddr::from((ip, port)),
            path: path.to_string(),
        })
    }
}

impl LoadOptions {
    pub fn new(target: Target, rate: f64, duration: Duration) -> Result<Self, OptionsError> {
        if !(rate > 0.0 && rate.is_finite()) || duration.is_zero() {
            return Err(OptionsError::Zero);
        }
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Ok(LoadOptions {
            target,
            rate,
            duration,
            warmup: Duration::ZERO,
            connections: 64,
            timeout: Duration::from_secs(2),
            headers: Vec::new(),
            unique_header: None,
            keys: None,
            run_id: format!("{:x}", nanos & 0xffff_ffff_ffff),
        })
    }

    /// Adds a header given as `name: value`.
    pub fn header(mut self, line: &str) -> Result<Self, OptionsError> {
        let bad = || OptionsError::Header(line.to_string());
        let (name, value) = line.split_once(':').ok_or_else(bad)?;
        let (name, value) = (name.trim(), value.trim());
        let token = |c: char| c.is_ascii_alphanumeric() || "-_!#$%&'*+.^`|~".contains(c);
        if name.is_empty() || !name.chars().all(token) || value.contains(['\r', '\n']) {
            return Err(bad());
        }
        self.headers.push((name.to_string(), value.to_string()));
        Ok(self)
    }

    /// The bytes of request number `seq`.
    pub fn request(&self, seq: u64) -> Vec<u8> {
        let mut req = String::with_capacity(128);
        let _ = write!(
            req,
            "GET {} HTTP/1.1\r\nhost: {}\r\n",
            self.target.path, self.target.addr
        );
        for (name, value) in &self.headers {
            let _ = write!(req, "{name}: {value}\r\n");
        }
        match (&self.unique_header, self.keys) {
            (Some(name), Some(keys)) if keys > 0 => {
                // A prime stride visits every key once per `keys` requests
                // (when `keys` is not its multiple) in a scattered order.
                let k = seq.wrapping_mul(1_000_003) % keys;
                let _ = write!(req, "{name}: k{k}\r\n");
            }
            (Some(name), _) => {
                let _ = write!(req, "{name}: {}-{seq}\r\n", self.run_id);
            }
            (None, _) => {}
        }
        req.push_str("\r\n");
        req.into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_urls_are_accepted() {
        let t = Target::parse("http://127.0.0.1:8080/x?y=1");
        assert_eq!(t.map(|t| t.path), Ok("/x?y=1".to_string()));
        assert!(Target::parse("http://127.0.0.1:8080").is_ok());
        for bad in [
            "http://10.0.0.1:80/",
            "https://127.0.0.1:1/",
            "http://localhost:80/",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unique_keys_differ_per_request() -> Result<(), OptionsError> {
        let target = Target::parse("http://127.0.0.1:9/")?;
        let mut o = LoadOptions::new(target, 1.0, Duration::from_secs(1))?.header("x-a: 1")?;
        o.unique_header = Some("x-key".into());
        let (a, b) = (o.request(1), o.request(2));
        assert_ne!(a, b);
        assert!(String::from_utf8_lossy(&a).contains("x-a: 1\r\n"));
        assert!(o.clone().header("bad header: x").is_err());
        Ok(())
    }

    #[test]
    fn a_key_space_repeats_each_key_once_per_round() -> Result<(), OptionsError> {
        let target = Target::parse("http://127.0.0.1:9/")?;
        let mut o = LoadOptions::new(target, 1.0, Duration::from_secs(1))?;
        o.unique_header = Some("x-key".into());
        o.keys = Some(1_000);
        let key = |seq| String::from_utf8_lossy(&o.request(seq)).into_owned();
        let round: std::collections::HashSet<String> = (0..1_000).map(key).collect();
        assert_eq!(round.len(), 1_000, "every key once in a round");
        assert_eq!(key(7), key(1_007), "and again in the next");
        assert_ne!(key(7), key(8));
        Ok(())
    }
}
