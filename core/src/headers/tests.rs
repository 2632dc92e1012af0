use super::*;
use crate::limit::limit;

#[test]
fn a_rejection_reads_as_the_contract_shows() {
    let l = limit(100, NANOS_PER_SEC, 100);
    let f = rejection_fields(HeaderStyle::Ietf, "search-per-api-key", &l, 300_000_000);
    let get = |n: &str| f.get(n).and_then(|v| std::str::from_utf8(v).ok());
    assert_eq!(get("retry-after"), Some("1"));
    assert_eq!(
        get("ratelimit-policy"),
        Some("\"search-per-api-key\";q=100;w=1")
    );
    assert_eq!(get("ratelimit"), Some("\"search-per-api-key\";r=0;t=1"));
    assert_eq!(get("x-envoy-ratelimited"), Some("true"));
    assert_eq!(get("x-meshlimit-rule"), Some("search-per-api-key"));
    let names: Vec<&str> = f.iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "retry-after",
            "ratelimit-policy",
            "ratelimit",
            "x-envoy-ratelimited",
            "x-meshlimit-rule",
            "content-type"
        ]
    );
    assert_eq!(
        rejection_body("search-per-api-key", 300_000_000),
        r#"{"error":"rate_limited","rule":"search-per-api-key","retry_after_seconds":1}"#
    );
}

#[test]
fn a_sub_second_policy_advertises_the_rate_it_enforces() {
    let l = limit(5, 250_000_000, 5);
    let f = rejection_fields(HeaderStyle::Ietf, "r", &l, 1);
    let get = |n: &str| f.get(n).and_then(|v| std::str::from_utf8(v).ok());
    assert_eq!(get("ratelimit-policy"), Some("\"r\";q=20;w=1"));
    let l = limit(5, 1_500_000_000, 5);
    let f = rejection_fields(HeaderStyle::Ietf, "r", &l, 1);
    let get = |n: &str| f.get(n).and_then(|v| std::str::from_utf8(v).ok());
    assert_eq!(get("ratelimit-policy"), Some("\"r\";q=6;w=2"));
}

#[test]
fn structured_fields_keep_the_rfcs_rules() {
    // The largest sf-integer is 15 digits: a larger count is written as that.
    assert_eq!(
        structured("r", [("q", u64::MAX), ("w", 1)]),
        "\"r\";q=999999999999999;w=1"
    );
    assert_eq!(
        structured("r", [("q", 999_999_999_999_999)]),
        "\"r\";q=999999999999999"
    );
    // Quotes and backslashes are escaped; what an sf-string cannot hold
    // (a control character, non-ASCII) gives an empty string, not a broken field.
    assert_eq!(structured("a\"b\\c", [("r", 0)]), r#""a\"b\\c";r=0"#);
    assert_eq!(structured("a\nb", [("r", 0)]), "\"\";r=0");
    assert_eq!(structured("\u{e9}", [("r", 0)]), "\"\";r=0");
    // A key outside the RFC's syntax is left out.
    assert_eq!(structured("r", [("Q", 1), ("t", 2)]), "\"r\";t=2");
}

#[test]
fn a_quota_field_too_long_for_the_stack_is_written_whole() {
    // The longest valid name, all of it escaped, fits the stack; a longer one
    // (no compiled rule has one) goes to the heap, still whole.
    for name in ["\"".repeat(70), "x".repeat(300), "a\\b".repeat(100)] {
        let q = Quota {
            rule: &name,
            limit: limit(u32::MAX, 1_000_000_000, u32::MAX),
            remaining: u32::MAX,
            reset_ns: u64::MAX,
        };
        let fields = quota_fields(HeaderStyle::Ietf, &q);
        let (q_, w) = q.limit.window_quota();
        assert_eq!(fields[0].1, structured(&name, [("q", q_), ("w", w)]));
        let reset = u64::MAX.div_ceil(NANOS_PER_SEC);
        let expected = structured(&name, [("r", u64::from(u32::MAX)), ("t", reset)]);
        assert_eq!(fields[1].1, expected);
        assert!(fields[1].1.starts_with('"') && fields[1].1.len() > name.len());
    }
}

/// The RFC's writer, as the `sfv` crate implements it: what `structured`
/// must write, byte for byte.
fn sfv_item(name: &str, params: &[(&str, u64)]) -> String {
    let name = sfv::StringRef::from_str(name).unwrap_or(sfv::StringRef::EMPTY);
    let mut item = sfv::ItemSerializer::new().bare_item(name);
    for (key, value) in params {
        let value = sfv::Integer::try_from(*value).unwrap_or(sfv::Integer::MAX);
        if let Ok(key) = sfv::KeyRef::from_str(key) {
            item = item.parameter(key, value);
        }
    }
    item.finish()
}

proptest::proptest! {
    #[test]
    fn structured_fields_are_the_rfc_writers_byte_for_byte(
        name in "[a-z0-9._\\-\"\\\\ \\x00-\\x1f\\x7f\u{e9}A-Z]{0,12}",
        keys in proptest::collection::vec("[a-zA-Z*0-9_.-]{0,3}", 2),
        values in proptest::collection::vec(proptest::prelude::any::<u64>(), 2),
    ) {
        let (k0, k1) = (keys[0].as_str(), keys[1].as_str());
        // Keys are `'static` in the writer: leak the few this case uses.
        let (k0, k1): (&'static str, &'static str) =
            (Box::leak(k0.into()), Box::leak(k1.into()));
        let ours = structured(&name, [(k0, values[0]), (k1, values[1] % 2_000_000_000_000_000)]);
        let theirs = sfv_item(&name, &[(k0, values[0]), (k1, values[1] % 2_000_000_000_000_000)]);
        proptest::prop_assert_eq!(ours, theirs);
    }
}

proptest::proptest! {
    #[test]
    fn a_rejection_body_is_serde_jsons_byte_for_byte(
        rule in "[a-z0-9._\\-\"\\\\ \\x00-\\x1f\\x7f\u{e9}\u{2028}\u{1f600}A-Z]{0,12}",
        retry_ns in proptest::prelude::any::<u64>(),
    ) {
        #[derive(serde::Serialize)]
        struct Body<'a> {
            error: &'static str,
            rule: &'a str,
            retry_after_seconds: u64,
        }
        let theirs = serde_json::to_string(&Body {
            error: "rate_limited",
            rule: &rule,
            retry_after_seconds: retry_after_secs(retry_ns),
        })
        .unwrap();
        proptest::prop_assert_eq!(rejection_body(&rule, retry_ns), theirs);
    }
}

#[test]
fn grpc_is_told_apart_by_its_content_type() {
    let p = |v: &str| Protocol::of_content_type(Some(v.as_bytes()));
    assert_eq!(p("application/grpc"), Protocol::Grpc);
    assert_eq!(p("application/grpc+proto"), Protocol::Grpc);
    assert_eq!(p("application/grpc;charset=utf-8"), Protocol::Grpc);
    assert_eq!(p("Application/GRPC"), Protocol::Grpc);
    assert_eq!(p("application/grpc-web"), Protocol::Http);
    assert_eq!(p("application/grpc-web+proto"), Protocol::Http);
    assert_eq!(p("application/json"), Protocol::Http);
    assert_eq!(p("application/grp"), Protocol::Http);
    assert_eq!(p(""), Protocol::Http);
    assert_eq!(Protocol::of_content_type(None), Protocol::Http);
    assert_eq!(
        Protocol::of_content_type(Some(b"application/grpc\xff")),
        Protocol::Http
    );
}

#[test]
fn retry_after_rounds_up_to_whole_seconds() {
    assert_eq!(retry_after_secs(0), 1);
    assert_eq!(retry_after_secs(1), 1);
    assert_eq!(retry_after_secs(NANOS_PER_SEC), 1);
    assert_eq!(retry_after_secs(NANOS_PER_SEC + 1), 2);
    assert_eq!(retry_after_secs(1_500_000_000), 2);
    // A 10-per-hour rule's denial, a little under six minutes from now.
    assert_eq!(retry_after_secs(359_200_000_000), 360);
    let l = limit(10, 3_600 * NANOS_PER_SEC, 10);
    let f = rejection_fields(HeaderStyle::Ietf, "r", &l, 359_200_000_000);
    let get = |n: &str| f.get(n).and_then(|v| std::str::from_utf8(v).ok());
    assert_eq!(get("retry-after"), Some("360"));
    assert_eq!(get("ratelimit"), Some("\"r\";r=0;t=360"));
    assert_eq!(
        rejection_body("r", 359_200_000_000),
        r#"{"error":"rate_limited","rule":"r","retry_after_seconds":360}"#
    );
}

#[test]
fn an_http_answer_is_the_429_503_and_400_as_before() {
    let l = limit(100, NANOS_PER_SEC, 100);
    let (status, fields, body) =
        rejection(Protocol::Http, HeaderStyle::Ietf, "r", &l, 300_000_000).wire();
    assert_eq!(status, 429);
    assert_eq!(
        fields,
        rejection_fields(HeaderStyle::Ietf, "r", &l, 300_000_000).to_strings()
    );
    assert_eq!(body, rejection_body("r", 300_000_000));
    let (fields, body) = unavailable_response("r");
    assert_eq!(
        unavailable(Protocol::Http, "r").wire(),
        (503, fields.to_strings(), body)
    );
    let e = crate::rules::RequestError::RepeatedHeader("x-api-key".into());
    let (fields, body) = bad_request_response(&e);
    assert_eq!(
        bad_request(Protocol::Http, &e).wire(),
        (400, fields.to_strings(), body)
    );
}

#[test]
fn a_grpc_rejection_is_resource_exhausted_with_the_same_fields() {
    let l = limit(100, NANOS_PER_SEC, 100);
    let (status, fields, body) = rejection(
        Protocol::Grpc,
        HeaderStyle::Ietf,
        "search-per-api-key",
        &l,
        300_000_000,
    )
    .wire();
    assert_eq!(status, 200);
    assert_eq!(body, "");
    fn expect(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }
    assert_eq!(
        fields,
        expect(&[
            ("content-type", "application/grpc"),
            ("grpc-status", "8"),
            (
                "grpc-message",
                "rate limited by rule search-per-api-key; retry after 1 s"
            ),
            ("retry-after", "1"),
            ("ratelimit-policy", "\"search-per-api-key\";q=100;w=1"),
            ("ratelimit", "\"search-per-api-key\";r=0;t=1"),
            ("x-envoy-ratelimited", "true"),
            ("x-meshlimit-rule", "search-per-api-key"),
        ])
    );
}

#[test]
fn the_503_and_400_bodies_read_as_the_contract_shows() {
    let (fields, body) = unavailable_response("r");
    assert_eq!(
        fields,
        HeaderList::from_pairs([
            ("retry-after", "1"),
            ("x-envoy-ratelimited", "true"),
            ("x-meshlimit-rule", "r"),
            ("content-type", "application/json"),
        ])
    );
    assert_eq!(body, r#"{"error":"limiter_unavailable","rule":"r"}"#);
    let e = crate::rules::RequestError::RepeatedHeader("x-api-key".into());
    let (fields, body) = bad_request_response(&e);
    assert_eq!(
        fields,
        HeaderList::from_pairs([("content-type", "application/json")])
    );
    assert_eq!(
        body,
        r#"{"detail":"header `x-api-key` is sent more than once; a rule keys on it","error":"ambiguous_request"}"#
    );
}

#[test]
fn a_grpc_fail_closed_answer_is_unavailable_and_bad_input_invalid_argument() {
    let (status, fields, _) = unavailable(Protocol::Grpc, "r").wire();
    assert_eq!(status, 200);
    let get = |n: &str| {
        fields
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(get("grpc-status"), Some("14"));
    assert_eq!(get("content-type"), Some("application/grpc"));
    assert_eq!(get("retry-after"), Some("1"));
    assert_eq!(get("x-envoy-ratelimited"), Some("true"));
    assert_eq!(get("x-meshlimit-rule"), Some("r"));
    let e = crate::rules::RequestError::RepeatedHeader("x-api-key".into());
    let Answer::Grpc { status, .. } = bad_request(Protocol::Grpc, &e) else {
        panic!("a gRPC request gets a gRPC answer");
    };
    assert_eq!(status, grpc_status::INVALID_ARGUMENT);
}

#[test]
fn grpc_message_is_percent_encoded() {
    assert_eq!(percent_encode("a b%c\u{e9}\n"), "a b%25c%C3%A9%0A");
}

#[test]
fn legacy_and_off_styles() {
    let q = Quota {
        rule: "r",
        limit: limit(5, NANOS_PER_SEC, 5),
        remaining: 3,
        reset_ns: 1,
    };
    assert_eq!(
        quota_fields(HeaderStyle::Legacy, &q),
        vec![
            ("x-ratelimit-limit", "5".to_string()),
            ("x-ratelimit-remaining", "3".to_string()),
            ("x-ratelimit-reset", "1".to_string()),
        ]
    );
    assert!(quota_fields(HeaderStyle::Off, &q).is_empty());
}

/// The fields a window's answers carry, from core's own window maths: a fixed
/// window's 429 says to retry at the window's end and its `RateLimit` resets
/// there; a sliding window's says to retry when its weighted count leaves room,
/// and a grant's `t` is when nothing counted now weighs any more.
#[test]
fn a_windows_fields_say_when_its_window_lets_requests_through() {
    use crate::limit::Algorithm;
    use crate::window::Window;
    use crate::Take;
    let get = |f: &HeaderList, n: &str| {
        f.get(n)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    };
    let minute = 60 * NANOS_PER_SEC;
    // 100 per minute, fixed, all spent 45 s into the minute.
    let fixed = limit(100, minute, 1).with_algorithm(Algorithm::FixedWindow);
    let mut w = Window::empty();
    let now = 10 * minute + 45 * NANOS_PER_SEC;
    let Take::Granted { reset_ns, .. } = w.take(&fixed, now, 100, 100) else {
        panic!("a fresh window grants its limit")
    };
    let quota = Quota {
        rule: "per-minute",
        limit: fixed,
        remaining: 0,
        reset_ns,
    };
    let f = HeaderList::from_pairs(quota_fields(HeaderStyle::Ietf, &quota));
    assert_eq!(get(&f, "ratelimit-policy"), "\"per-minute\";q=100;w=60");
    assert_eq!(get(&f, "ratelimit"), "\"per-minute\";r=0;t=15");
    let Take::Denied { retry_after_ns } = w.take(&fixed, now + 1, 1, 1) else {
        panic!("the window is spent")
    };
    let f = rejection_fields(HeaderStyle::Ietf, "per-minute", &fixed, retry_after_ns);
    assert_eq!(get(&f, "retry-after"), "15");
    assert_eq!(get(&f, "ratelimit"), "\"per-minute\";r=0;t=15");
    // 10 per minute, sliding: 10 counted in the last minute's first half, none
    // yet in this one, 30 s in: half of them still weigh, so 5 fit now.
    let sliding = limit(10, minute, 1).with_algorithm(Algorithm::SlidingWindow);
    let mut w = Window::from_parts(9, 10, 0);
    let now = 10 * minute + 30 * NANOS_PER_SEC;
    let Take::Granted {
        tokens,
        remaining,
        reset_ns,
    } = w.take(&sliding, now, 1, 100)
    else {
        panic!("half the window is free")
    };
    assert_eq!((tokens, remaining), (5, 0));
    // These 5 weigh until the end of the next minute: 90 s.
    let quota = Quota {
        rule: "sliding",
        limit: sliding,
        remaining,
        reset_ns,
    };
    let f = HeaderList::from_pairs(quota_fields(HeaderStyle::Ietf, &quota));
    assert_eq!(get(&f, "ratelimit-policy"), "\"sliding\";q=10;w=60");
    assert_eq!(get(&f, "ratelimit"), "\"sliding\";r=0;t=90");
    // One more fits when the last minute's 10 weigh 4: 36 s in, 6 s from now.
    let Take::Denied { retry_after_ns } = w.take(&sliding, now, 1, 1) else {
        panic!("the weighted count is at the limit")
    };
    let f = rejection_fields(HeaderStyle::Ietf, "sliding", &sliding, retry_after_ns);
    assert_eq!(get(&f, "retry-after"), "6");
}

proptest::proptest! {
    /// The RateLimit value's writer, its two keys written whole, is the
    /// general structured-field writer's bytes.
    #[test]
    fn the_ratelimit_value_is_the_structured_member(
        rule in "[a-z0-9._-]{1,12}|\\PC{0,6}",
        remaining in proptest::prelude::any::<u32>(),
        reset_ns in proptest::prelude::any::<u64>(),
    ) {
        let quota = Quota { rule: &rule, limit: limit(1, NANOS_PER_SEC, 1), remaining, reset_ns };
        let mut value = String::new();
        write_ratelimit_value(&mut value, &quota);
        let reset = reset_ns.div_ceil(NANOS_PER_SEC);
        proptest::prop_assert_eq!(value, structured(&rule, [("r", u64::from(remaining)), ("t", reset)]));
    }
}
