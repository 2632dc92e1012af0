//! End to end through real Envoy, the real filter and the real agent on a real
//! redis-server (the lease script on the server's clock): what a client sees
//! of a fixed and of a sliding window. Windows are aligned to the Unix epoch
//! of the redis-server, which runs on this machine: the test reads the same
//! clock to know where in a window it is, and waits for a point of the clock
//! (bounded) rather than for a guessed time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use meshlimit_tests::{wait_for, AgentOptions, Probe, RedisServer, Response, Stack};

const RULES: &str = include_str!("../../fixtures/rules/windows-fixed-and-sliding.yaml");

/// The fixture's `fixed` rule: 5 per 10 s; `sliding`: 4 per 2 s.
const FIXED_PER: Duration = Duration::from_secs(10);
const SLIDING_PER: Duration = Duration::from_secs(2);

fn unix_now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

/// How far into its `per` window the clock is.
fn into_window(per: Duration) -> Duration {
    Duration::from_nanos((unix_now().as_nanos() % per.as_nanos()) as u64)
}

/// Waits (at most two windows) until the clock is between `from` and `to`
/// into a `per` window.
fn wait_into_window(per: Duration, from: Duration, to: Duration) {
    wait_for(2 * per, "a point of the window", || {
        let at = into_window(per);
        if (from..=to).contains(&at) {
            Probe::Ready(())
        } else {
            Probe::Pending
        }
    })
    .unwrap();
}

fn stack(redis: &RedisServer) -> Stack {
    // The harness's patient deadlines: on a loaded machine a timeout would
    // hand a decision to the fail-local policy, which is not what is tested
    // here.
    Stack::start_with(AgentOptions::new(RULES).store(redis.url()), |c| c)
}

fn get(stack: &Stack, path: &str, key: &str) -> Response {
    stack.get(path, &[("x-api-key", key)])
}

/// Requests `path` for `key` until one is admitted (each 429 is cached by the
/// filter until the wait the store announced) and answers when, by the clock.
fn first_200(stack: &Stack, path: &str, key: &str, within: Duration) -> Duration {
    wait_for(within, "a 200", || match get(stack, path, key).status {
        200 => Probe::Ready(unix_now()),
        429 => Probe::Pending,
        other => Probe::Failed(format!("status {other}")),
    })
    .unwrap()
}

#[test]
fn a_fixed_window_admits_its_limit_then_says_retry_at_the_windows_end() {
    let redis = RedisServer::start();
    let stack = stack(&redis);
    // Early in a window, so that the five requests and the 429 fall in one.
    wait_into_window(FIXED_PER, Duration::ZERO, Duration::from_secs(5));
    let window_end = unix_now() + FIXED_PER - into_window(FIXED_PER);
    for left in (0..5).rev() {
        let r = get(&stack, "/fixed", "alice");
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.header("ratelimit-policy"), Some("\"fixed\";q=5;w=10"));
        // The quota comes back whole at the window's end.
        let t = (window_end - unix_now()).as_secs_f64().ceil() as u64;
        let header = r.header("ratelimit").unwrap();
        assert!(
            [t, t + 1]
                .map(|t| format!("\"fixed\";r={left};t={t}"))
                .contains(&header.to_string()),
            "{header}, the window ends in about {t} s"
        );
    }
    let r = get(&stack, "/fixed", "alice");
    let to_end = window_end - unix_now();
    assert_eq!(r.status, 429, "{r:?}");
    // Retry at the window's end (whole seconds, rounded up), where a token
    // bucket of 5 per 10 s would say 2 s.
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    let expected = to_end.as_secs_f64().ceil() as u64;
    assert!(
        retry == expected || retry == expected + 1,
        "retry-after {retry}, the window ends in {to_end:?}"
    );
    assert!(retry >= 5, "retry-after {retry}");
    assert_eq!(r.header("x-meshlimit-rule"), Some("fixed"));
    // Another key has its own window.
    assert_eq!(get(&stack, "/fixed", "bob").status, 200);
    // Refused until the window ends, admitted from then on: the first 200
    // comes no earlier than the window's end.
    let first = first_200(&stack, "/fixed", "alice", to_end + Duration::from_secs(3));
    assert!(
        first + Duration::from_millis(5) >= window_end,
        "admitted {:?} before the window's end",
        window_end - first
    );
    // And the new window holds the whole limit again: 4 more, then 429.
    let statuses: Vec<u16> = (0..5)
        .map(|_| get(&stack, "/fixed", "alice").status)
        .collect();
    assert_eq!(statuses, [200, 200, 200, 200, 429]);
}

#[test]
fn a_sliding_window_weighs_the_last_window_across_its_edge() {
    let redis = RedisServer::start();
    let stack = stack(&redis);
    // 4 per 2 s. Spend all 4 early in a window.
    wait_into_window(SLIDING_PER, Duration::ZERO, Duration::from_millis(400));
    let window_end = unix_now() + SLIDING_PER - into_window(SLIDING_PER);
    for _ in 0..4 {
        assert_eq!(get(&stack, "/sliding", "carol").status, 200);
    }
    let r = get(&stack, "/sliding", "carol");
    assert_eq!(r.status, 429, "{r:?}");
    // One more fits a quarter into the next window (4 × 0.75 + 1 = 4): the
    // rest of this window plus 0.5 s, rounded up.
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    let fits = window_end + SLIDING_PER / 4;
    let expected = (fits - unix_now()).as_secs_f64().ceil() as u64;
    assert!(
        retry == expected || retry == expected + 1,
        "retry-after {retry}, one more fits in {:?}",
        fits - unix_now()
    );
    // Just past the edge a fixed window would admit 4 again; the sliding window
    // still weighs the last one's 4 at nearly 4.
    wait_into_window(SLIDING_PER, Duration::ZERO, Duration::from_millis(150));
    assert!(unix_now() < fits, "the edge was passed late");
    assert_eq!(get(&stack, "/sliding", "carol").status, 429);
    // The first 200 comes once the weighted count leaves room: 0.5 s into the
    // window, not before (polled with requests; each 429 is cached by the filter
    // until the wait the store announced).
    let first = first_200(&stack, "/sliding", "carol", Duration::from_secs(3));
    assert!(
        first + Duration::from_millis(5) >= fits,
        "admitted {:?} before the weighted count left room",
        fits - first
    );
    assert!(
        first < fits + Duration::from_millis(500),
        "admitted only {:?} after it fitted",
        first - fits
    );
    // Right after it, the weighted count (3 and a bit, plus the 1) is full.
    if unix_now() < fits + Duration::from_millis(200) {
        assert_eq!(get(&stack, "/sliding", "carol").status, 429);
    }
}
