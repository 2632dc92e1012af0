//! The client IP a per-IP rule keys on. Only the downstream address Envoy saw is
//! trusted, unless the operator says how many proxies in front of Envoy append to
//! X-Forwarded-For (`trusted_hops`). The leftmost entry is whatever the client
//! wrote, so it is never used.

/// Resolves the client IP from the downstream address (`ip:port`, `[v6]:port` or a
/// bare IP) and the X-Forwarded-For header. With `trusted_hops = N > 0`, the entry N
/// hops from the right of X-Forwarded-For is used; when the header has fewer entries
/// than that (a request that did not come through the trusted proxies), the
/// downstream address is used instead.
pub fn resolve(downstream: Option<&str>, xff: Option<&str>, trusted_hops: u32) -> Option<String> {
    if trusted_hops > 0 {
        if let Some(ip) = xff.and_then(|h| from_right(h, trusted_hops as usize)) {
            return Some(ip);
        }
    }
    downstream.map(strip_port).filter(|ip| !ip.is_empty())
}

fn from_right(xff: &str, hops: usize) -> Option<String> {
    let entries: Vec<&str> = xff.split(',').map(str::trim).collect();
    let index = entries.len().checked_sub(hops)?;
    let ip = strip_port(entries.get(index)?);
    // A malformed entry (`[`, `:80`) names no address: the downstream one is used.
    (!ip.is_empty()).then_some(ip)
}

fn strip_port(addr: &str) -> String {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default().to_string();
    }
    match addr.rsplit_once(':') {
        // One colon: IPv4 with a port. More: a bare IPv6 address.
        Some((ip, port)) if !ip.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => {
            ip.to_string()
        }
        _ => addr.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downstream_address_without_trusted_hops() {
        let ip = resolve(Some("10.0.0.7:5555"), Some("1.2.3.4"), 0);
        assert_eq!(ip.as_deref(), Some("10.0.0.7"));
        assert_eq!(resolve(Some("[::1]:80"), None, 0).as_deref(), Some("::1"));
        assert_eq!(resolve(Some("::1"), None, 0).as_deref(), Some("::1"));
    }

    #[test]
    fn forged_leftmost_entries_change_nothing() {
        let honest = resolve(Some("10.0.0.1:1"), Some("203.0.113.9"), 1);
        let forged = resolve(Some("10.0.0.1:1"), Some("6.6.6.6, 203.0.113.9"), 1);
        assert_eq!(honest.as_deref(), Some("203.0.113.9"));
        assert_eq!(forged, honest);
    }

    #[test]
    fn a_malformed_trusted_entry_falls_back_to_downstream() {
        // Cases of the client_ip fuzzer: read as "", these would all share a bucket.
        for xff in ["[", ":80", "6.6.6.6, [", "1.2.3.4, []:1"] {
            let ip = resolve(Some("10.0.0.1:1"), Some(xff), 1);
            assert_eq!(ip.as_deref(), Some("10.0.0.1"), "{xff}");
        }
    }

    #[test]
    fn too_few_entries_fall_back_to_downstream() {
        let ip = resolve(Some("10.0.0.1:1"), Some("203.0.113.9"), 2);
        assert_eq!(ip.as_deref(), Some("10.0.0.1"));
    }
}
