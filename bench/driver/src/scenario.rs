//! The configurations `make bench` compares, the traffic each is sent, and the
//! rules file the agent serves. Every configuration is sent exactly one request
//! header, so the request Envoy parses is the same size in each.

/// The header every configuration but (d) and (c3) is sent, `x-bench-key: hot`:
/// the key of meshlimit's hot rule, and the header the floor filter reads.
pub const KEY_HEADER: &str = "x-bench-key";
pub const HOT_VALUE: &str = "hot";
/// (d): a value unique to each request, keyed by rule `bench-cold`.
pub const COLD_HEADER: &str = "x-bench-cold";
/// (c3): keyed by rule `bench-limited`, whose limit is a third of the load.
pub const LIMITED_HEADER: &str = "x-bench-limited";

/// (g0), (g1): every tenth request also carries this header, keyed by rule
/// `bench-over` (one request a day): a rejection the filter's denial cache
/// answers, and the decision log keeps.
pub const OVER_HEADER: &str = "x-bench-over";

/// The path every configuration but the rules-at-scale runs requests.
pub const ROOT: &str = "/";

/// Far above any load this machine can offer: every request is admitted.
pub const HIGH_LIMIT: u64 = 10_000_000;

/// What sits in Envoy's HTTP filter chain before the router.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Filter {
    None,
    /// Envoy's `local_ratelimit`, refilling this many tokens a second.
    NativeLocal {
        per_second: u64,
    },
    /// meshlimit's filter with the repository's plugin configuration.
    Meshlimit,
    /// meshlimit's filter handing no records to the decision log
    /// (`decision_log: false`).
    MeshlimitUnlogged,
    /// The reference module in `bench/floor-filter`, in this mode.
    Floor(&'static str),
    /// Envoy's `ratelimit` filter calling `bench/rls` (a gRPC rate limit
    /// service, one Redis round trip a request) with a descriptor of this
    /// request header's value: the per-request remote check.
    RemoteCheck(&'static str),
}

/// Which request header carries the key, and its value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Keys {
    Fixed(&'static str, &'static str),
    /// A new value for every request: every request is a lease miss.
    Unique(&'static str),
    /// `Fixed`, and every tenth request also [`OVER_HEADER`]: 10% rejected.
    TenthRejected(&'static str, &'static str),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scenario {
    /// `a` … `f`, `b3`, `c3`: the issue's names.
    pub id: &'static str,
    pub label: &'static str,
    pub filter: Filter,
    pub keys: Keys,
    /// The request path (`/` but for the rules-at-scale runs).
    pub path: &'static str,
}

impl Scenario {
    pub fn uses_agent(&self) -> bool {
        matches!(self.filter, Filter::Meshlimit | Filter::MeshlimitUnlogged)
    }
}

/// (a) … (f), in the order each round runs them.
pub fn admitted() -> Vec<Scenario> {
    let hot = Keys::Fixed(KEY_HEADER, HOT_VALUE);
    vec![
        Scenario {
            id: "a",
            label: "no filter",
            filter: Filter::None,
            keys: hot,
            path: ROOT,
        },
        Scenario {
            id: "b",
            label: "Envoy local_ratelimit",
            filter: Filter::NativeLocal {
                per_second: HIGH_LIMIT,
            },
            keys: hot,
            path: ROOT,
        },
        Scenario {
            id: "c",
            label: "meshlimit, hot key (local leases)",
            filter: Filter::Meshlimit,
            keys: hot,
            path: ROOT,
        },
        Scenario {
            id: "d",
            label: "meshlimit, cold keys (every request a miss)",
            filter: Filter::Meshlimit,
            keys: Keys::Unique(COLD_HEADER),
            path: ROOT,
        },
        Scenario {
            id: "e",
            label: "floor: header + shared-data get + CAS set",
            filter: Filter::Floor("floor"),
            keys: hot,
            path: ROOT,
        },
        Scenario {
            id: "f",
            label: "empty proxy-wasm filter",
            filter: Filter::Floor("empty"),
            keys: hot,
            path: ROOT,
        },
    ]
}

/// The floor plus one more of the things meshlimit's filter does per request,
/// each priced by its difference from (e). Run with (a)–(f) in every round.
pub fn attribution() -> Vec<Scenario> {
    let hot = Keys::Fixed(KEY_HEADER, HOT_VALUE);
    vec![
        Scenario {
            id: "e1",
            label: "floor + every request header fetched",
            filter: Filter::Floor("all_headers"),
            keys: hot,
            path: ROOT,
        },
        Scenario {
            id: "e2",
            label: "floor + two stream properties (source.address, xds.route_name)",
            filter: Filter::Floor("properties"),
            keys: hot,
            path: ROOT,
        },
        Scenario {
            id: "e3",
            label: "floor + two response headers added",
            filter: Filter::Floor("response_headers"),
            keys: hot,
            path: ROOT,
        },
        Scenario {
            id: "e4",
            label: "floor + three filter-state properties set (the access log's)",
            filter: Filter::Floor("filter_state"),
            keys: hot,
            path: ROOT,
        },
    ]
}

/// (r): the per-request remote check, on the cold keys' header of (d): Envoy's
/// `ratelimit` filter asks `bench/rls` about every request, a new key each
/// time, and the service counts it in Redis (limit far above the load).
pub fn remote_check() -> Scenario {
    Scenario {
        id: "r",
        label: REMOTE_CHECK_LABEL,
        filter: Filter::RemoteCheck(COLD_HEADER),
        keys: Keys::Unique(COLD_HEADER),
        path: ROOT,
    }
}

const REMOTE_CHECK_LABEL: &str =
    "per-request remote check: Envoy ratelimit filter + gRPC service + Redis (every request a new key)";

/// Every configuration a throughput round runs, in order: (r) right after (d),
/// the two ways of asking a remote service about every request.
pub fn throughput_round() -> Vec<Scenario> {
    let mut round = admitted();
    let after_d = round
        .iter()
        .position(|s| s.id == "d")
        .map_or(round.len(), |i| i + 1);
    round.insert(after_d, remote_check());
    round.into_iter().chain(attribution()).collect()
}

/// (b) and (c) again, offered about three times their limit of `limit`/s.
pub fn over_limit(limit: u64) -> Vec<Scenario> {
    vec![
        Scenario {
            id: "b3",
            label: "Envoy local_ratelimit at 3x its limit",
            filter: Filter::NativeLocal { per_second: limit },
            keys: Keys::Fixed(KEY_HEADER, HOT_VALUE),
            path: ROOT,
        },
        Scenario {
            id: "c3",
            label: "meshlimit hot key at 3x its limit",
            filter: Filter::Meshlimit,
            keys: Keys::Fixed(LIMITED_HEADER, HOT_VALUE),
            path: ROOT,
        },
    ]
}

/// (g0) and (g1): the hot key with 10% of requests rejected, the decision log
/// off, then on (every rejection and 1% of allowed decisions, `bench-hot`'s
/// default `log_sample`). What the log costs Envoy is (g1) − (g0).
pub fn decision_log() -> Vec<Scenario> {
    let keys = Keys::TenthRejected(KEY_HEADER, HOT_VALUE);
    vec![
        Scenario {
            id: "g0",
            label: "meshlimit, 10% rejected, decision log off",
            filter: Filter::MeshlimitUnlogged,
            keys,
            path: ROOT,
        },
        Scenario {
            id: "g1",
            label: "meshlimit, 10% rejected, decision log on (1% of allowed)",
            filter: Filter::Meshlimit,
            keys,
            path: ROOT,
        },
    ]
}

/// The agent's rules. The hot rules keep the default failure policy (`local`):
/// when a lease call misses its 5 ms deadline (a saturated Envoy queues the
/// answer), requests stay admitted and the report counts those decisions. The
/// cold rule fails closed, so a request the agent did not answer is a 503 and
/// is not counted as admitted: (d) measures requests that made the round trip.
/// `limited` is `bench-limited`'s rate, for the over-limit phase.
pub fn rules_yaml(limited: u64) -> String {
    let burst = (limited / 10).max(1);
    format!(
        "version: 1
rules:
  - name: bench-hot
    key: [{{ header: {KEY_HEADER} }}]
    limit: {{ requests: {HIGH_LIMIT}, per: 1s }}
  - name: bench-cold
    key: [{{ header: {COLD_HEADER} }}]
    limit: {{ requests: {HIGH_LIMIT}, per: 1s }}
    accuracy: exact
    on_failure: closed
  - name: bench-limited
    key: [{{ header: {LIMITED_HEADER} }}]
    limit: {{ requests: {limited}, per: 1s, burst: {burst} }}
  - name: bench-over
    key: [{{ header: {OVER_HEADER} }}]
    limit: {{ requests: 1, per: 1d }}
"
    )
}

/// (h): `bench-lease`, a hot key whose limit is comfortably above the offered
/// rate: every request admitted, and the lease path still exercised (leases of
/// about 100 ms of demand, renewed all the time).
pub const LEASE_HEADER: &str = "x-bench-lease";
/// (h3): `bench-lease-3x`, a hot key offered three times its limit.
pub const LEASE_3X_HEADER: &str = "x-bench-lease-3x";
/// (k): `bench-new`, an `accuracy: fast` rule and a new key on every request.
pub const NEW_KEY_HEADER: &str = "x-bench-new";
/// (kc): `bench-cold-start`, the same with `cold_start: admit`.
pub const COLD_START_HEADER: &str = "x-bench-cold-start";

/// The request-path configurations (open loop), each run beside (a) at the same
/// rate in the same round.
pub fn request_path() -> Vec<Scenario> {
    vec![
        Scenario {
            id: "h",
            label: "meshlimit, hot key on leases, all admitted (limit 4× the rate)",
            filter: Filter::Meshlimit,
            keys: Keys::Fixed(LEASE_HEADER, HOT_VALUE),
            path: ROOT,
        },
        Scenario {
            id: "h3",
            label: "meshlimit, hot key on leases, offered 3× its limit",
            filter: Filter::Meshlimit,
            keys: Keys::Fixed(LEASE_3X_HEADER, HOT_VALUE),
            path: ROOT,
        },
        Scenario {
            id: "k",
            label: "meshlimit, cold keys, `accuracy: fast` (every request a new key)",
            filter: Filter::Meshlimit,
            keys: Keys::Unique(NEW_KEY_HEADER),
            path: ROOT,
        },
        Scenario {
            id: "kl",
            label: "meshlimit, cold keys at a light load (every request a new key)",
            filter: Filter::Meshlimit,
            keys: Keys::Unique(NEW_KEY_HEADER),
            path: ROOT,
        },
        Scenario {
            id: "kc",
            label: "meshlimit, cold keys at a light load, `cold_start: admit`",
            filter: Filter::Meshlimit,
            keys: Keys::Unique(COLD_START_HEADER),
            path: ROOT,
        },
        Scenario {
            id: "rl",
            label: REMOTE_CHECK_LABEL,
            filter: Filter::RemoteCheck(NEW_KEY_HEADER),
            keys: Keys::Unique(NEW_KEY_HEADER),
            path: ROOT,
        },
        Scenario {
            id: "kf",
            label: "floor + one HTTP call a request to the agent's `GET /healthz`, waited on (the wait's floor)",
            filter: Filter::Floor("callout"),
            keys: Keys::Fixed(KEY_HEADER, HOT_VALUE),
            path: ROOT,
        },
    ]
}

/// The rule a request-path configuration's requests meet.
pub fn rule_of(id: &str) -> Option<&'static str> {
    match id {
        "h" => Some("bench-lease"),
        "h3" => Some("bench-lease-3x"),
        "k" | "kl" => Some("bench-new"),
        "kc" => Some("bench-cold-start"),
        _ => None,
    }
}

/// The request-path phase's rules: every one `accuracy: fast` with the default
/// failure policy (`local`), burst = limit, so a lease is about 100 ms of demand
/// and at most a tenth of the limit.
pub fn request_path_rules(admitted_limit: u64, over_limit: u64) -> String {
    format!(
        "version: 1
rules:
  - name: bench-lease
    key: [{{ header: {LEASE_HEADER} }}]
    limit: {{ requests: {admitted_limit}, per: 1s }}
    accuracy: fast
  - name: bench-lease-3x
    key: [{{ header: {LEASE_3X_HEADER} }}]
    limit: {{ requests: {over_limit}, per: 1s }}
    accuracy: fast
  - name: bench-new
    key: [{{ header: {NEW_KEY_HEADER} }}]
    limit: {{ requests: {HIGH_LIMIT}, per: 1s }}
    accuracy: fast
  - name: bench-cold-start
    key: [{{ header: {COLD_START_HEADER} }}]
    limit: {{ requests: {HIGH_LIMIT}, per: 1s }}
    accuracy: fast
    cold_start: admit
"
    )
}

/// The path the rules-at-scale runs request: only `bench-match` covers it.
pub const SCALE_PATH: &str = "/bench/match/items";
/// The path of the rules-at-scale runs that meet no rule: no rule covers it.
pub const NO_RULE_PATH: &str = "/bench/none/items";

/// The rules-at-scale configuration: meshlimit with many rules, one of which
/// applies to every request.
pub fn at_scale() -> Scenario {
    Scenario {
        id: "n",
        label: "meshlimit, N rules loaded, one applies",
        filter: Filter::Meshlimit,
        keys: Keys::Fixed(KEY_HEADER, HOT_VALUE),
        path: SCALE_PATH,
    }
}

/// The same Envoy and rules as [`at_scale`], sent requests no rule applies to:
/// what looking through N rules costs a request that none of them takes.
pub fn at_scale_no_rule() -> Scenario {
    Scenario {
        id: "n0",
        label: "meshlimit, N rules loaded, none applies",
        path: NO_RULE_PATH,
        ..at_scale()
    }
}

/// `n` rules keyed on `x-bench-key`, each on its own path prefix
/// (`/api/<i>/`), so a request to [`SCALE_PATH`] meets exactly one of them,
/// `bench-match`, and one to [`NO_RULE_PATH`] none, whatever `n`. `generation` changes `bench-rule-0`'s limit
/// (upwards), so each generation is a new rules version. One rule a line: 20,000
/// rules are about 2 MB, under the agent's 4 MiB bound on a rules file.
pub fn scale_rules_yaml(n: usize, generation: u64) -> String {
    let mut yaml = String::with_capacity(n * 110 + 64);
    yaml.push_str("version: 1\nrules:\n");
    for i in 0..n.saturating_sub(1) {
        let limit = if i == 0 {
            HIGH_LIMIT + generation
        } else {
            HIGH_LIMIT
        };
        yaml.push_str(&format!(
            "  - {{ name: bench-rule-{i}, match: {{ path_prefix: /api/{i}/ }}, key: [{{ header: {KEY_HEADER} }}], limit: {{ requests: {limit}, per: 1s }} }}\n"
        ));
    }
    yaml.push_str(&format!(
        "  - {{ name: bench-match, match: {{ path_prefix: /bench/match/ }}, key: [{{ header: {KEY_HEADER} }}], limit: {{ requests: {HIGH_LIMIT}, per: 1s }} }}\n"
    ));
    yaml
}

#[cfg(test)]
mod tests {
    use meshlimit_core::rules::{parse_rules, Accuracy, RequestError};
    use meshlimit_core::RequestInfo;

    use super::*;

    fn request(path: &str, headers: &[(&str, &str)]) -> RequestInfo {
        let headers = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RequestInfo::new(path, "GET", headers)
    }

    #[test]
    fn a_scale_request_meets_exactly_one_rule_or_none() -> Result<(), Box<dyn std::error::Error>> {
        for n in [1, 10, 1_000, 20_000] {
            let text = scale_rules_yaml(n, 0);
            let set = parse_rules("rules.yaml", &text)?;
            assert_eq!(set.rules().len(), n);
            let hit = request(SCALE_PATH, &[(KEY_HEADER, HOT_VALUE)]);
            let applicable = set.applicable(&hit)?;
            let names: Vec<&str> = applicable.iter().map(|a| a.rule.name.as_str()).collect();
            assert_eq!(names, ["bench-match"], "{n} rules");
            let miss = request(NO_RULE_PATH, &[(KEY_HEADER, HOT_VALUE)]);
            let applicable = set.applicable(&miss)?;
            assert!(
                applicable.is_empty(),
                "{n} rules: {NO_RULE_PATH} is covered"
            );
            // The reload's next generation is another version, accepted as a
            // change (a limit raised, never cut).
            let next = parse_rules("rules.yaml", &scale_rules_yaml(n, 1))?;
            if n > 1 {
                assert_ne!(set.version(), next.version(), "{n} rules");
            }
        }
        let twenty = scale_rules_yaml(20_000, 0).len();
        assert!(twenty < 3 * 1024 * 1024, "{twenty} bytes");
        Ok(())
    }

    #[test]
    fn a_rejected_tenth_meets_bench_over_first_and_the_rest_only_bench_hot(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let set = parse_rules("rules.yaml", &rules_yaml(HIGH_LIMIT))?;
        let names = |headers: &[(&str, &str)]| -> Result<Vec<String>, RequestError> {
            let req = request(ROOT, headers);
            let applicable = set.applicable(&req)?;
            Ok(applicable.iter().map(|a| a.rule.name.clone()).collect())
        };
        assert_eq!(names(&[(KEY_HEADER, HOT_VALUE)])?, ["bench-hot"]);
        assert_eq!(
            names(&[(KEY_HEADER, HOT_VALUE), (OVER_HEADER, "over")])?,
            ["bench-over", "bench-hot"]
        );
        assert!(decision_log()
            .iter()
            .all(|s| s.keys == Keys::TenthRejected(KEY_HEADER, HOT_VALUE) && s.uses_agent()));
        Ok(())
    }

    #[test]
    fn request_path_rules_each_take_one_configuration() -> Result<(), Box<dyn std::error::Error>> {
        let set = parse_rules("rules.yaml", &request_path_rules(40_000, 3_333))?;
        for sc in request_path() {
            let header = match sc.keys {
                Keys::Fixed(name, _) | Keys::Unique(name) | Keys::TenthRejected(name, _) => name,
            };
            let req = request(sc.path, &[(header, "v")]);
            let applicable = set.applicable(&req)?;
            let names: Vec<&str> = applicable.iter().map(|a| a.rule.name.as_str()).collect();
            match rule_of(sc.id) {
                Some(rule) => assert_eq!(names, [rule], "({})", sc.id),
                // (kf) runs no limiter and (rl) Envoy's ratelimit filter: the
                // agent's rules never see their requests.
                None => assert!(!sc.uses_agent(), "({})", sc.id),
            }
        }
        assert!(set.rules().iter().all(|r| r.accuracy == Accuracy::Fast));
        Ok(())
    }

    #[test]
    fn the_remote_check_asks_about_the_header_its_cold_keys_peer_sends() {
        let peer = |id: &str| {
            throughput_round()
                .into_iter()
                .chain(request_path())
                .find(|s| s.id == id)
        };
        for (remote, cold) in [("r", "d"), ("rl", "kl")] {
            let (Some(remote), Some(cold)) = (peer(remote), peer(cold)) else {
                panic!("({remote}) or ({cold}) is missing");
            };
            let Keys::Unique(header) = cold.keys else {
                panic!("({}) sends no unique keys", cold.id);
            };
            assert_eq!(
                remote.filter,
                Filter::RemoteCheck(header),
                "({})",
                remote.id
            );
            assert_eq!(remote.keys, cold.keys, "({})", remote.id);
            assert!(!remote.uses_agent());
        }
        let ids: Vec<&str> = throughput_round().iter().map(|s| s.id).collect();
        assert_eq!(ids[3..5], ["d", "r"]);
    }
}
