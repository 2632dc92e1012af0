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
    /// The reference module in `bench/floor-filter`, in this mode.
    Floor(&'static str),
}

/// Which request header carries the key, and its value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Keys {
    Fixed(&'static str, &'static str),
    /// A new value for every request: every request is a lease miss.
    Unique(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scenario {
    /// `a` … `f`, `b3`, `c3`: the names.
    pub id: &'static str,
    pub label: &'static str,
    pub filter: Filter,
    pub keys: Keys,
}

impl Scenario {
    pub fn uses_agent(&self) -> bool {
        self.filter == Filter::Meshlimit
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
        },
        Scenario {
            id: "b",
            label: "Envoy local_ratelimit",
            filter: Filter::NativeLocal {
                per_second: HIGH_LIMIT,
            },
            keys: hot,
        },
        Scenario {
            id: "c",
            label: "meshlimit, hot key (local leases)",
            filter: Filter::Meshlimit,
            keys: hot,
        },
        Scenario {
            id: "d",
            label: "meshlimit, cold keys (every request a miss)",
            filter: Filter::Meshlimit,
            keys: Keys::Unique(COLD_HEADER),
        },
        Scenario {
            id: "e",
            label: "floor: header + shared-data get + CAS set",
            filter: Filter::Floor("floor"),
            keys: hot,
        },
        Scenario {
            id: "f",
            label: "empty proxy-wasm filter",
            filter: Filter::Floor("empty"),
            keys: hot,
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
        },
        Scenario {
            id: "e2",
            label: "floor + two stream properties (source.address, xds.route_name)",
            filter: Filter::Floor("properties"),
            keys: hot,
        },
        Scenario {
            id: "e3",
            label: "floor + two response headers added",
            filter: Filter::Floor("response_headers"),
            keys: hot,
        },
    ]
}

/// Every configuration a throughput round runs, in order.
pub fn throughput_round() -> Vec<Scenario> {
    admitted().into_iter().chain(attribution()).collect()
}

/// (b) and (c) again, offered about three times their limit of `limit`/s.
pub fn over_limit(limit: u64) -> Vec<Scenario> {
    vec![
        Scenario {
            id: "b3",
            label: "Envoy local_ratelimit at 3x its limit",
            filter: Filter::NativeLocal { per_second: limit },
            keys: Keys::Fixed(KEY_HEADER, HOT_VALUE),
        },
        Scenario {
            id: "c3",
            label: "meshlimit hot key at 3x its limit",
            filter: Filter::Meshlimit,
            keys: Keys::Fixed(LIMITED_HEADER, HOT_VALUE),
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
"
    )
}
