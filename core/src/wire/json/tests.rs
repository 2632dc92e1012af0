use proptest::prelude::*;
use serde_json::{json, Value};

use super::super::tests::answers;
use super::super::{LeaseItem, LeaseRequest, WIRE_VERSION};
use super::*;
use crate::key::DescriptorKey;

/// What serde_json reads from `body`.
fn serde(body: &[u8]) -> Option<LeaseResponse> {
    serde_json::from_slice(body).ok()
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9._|%-]{0,24}",
        any::<String>(),
        proptest::collection::vec(0u8..0x20, 0..4).prop_map(|b| String::from_utf8(b).unwrap()),
    ]
}

fn item() -> impl Strategy<Value = LeaseItem> {
    (
        text(),
        text(),
        any::<u32>(),
        proptest::option::of(text()),
        proptest::option::of(any::<u32>()),
    )
        .prop_map(|(rule, key, cost, plan, want)| LeaseItem {
            rule,
            key: DescriptorKey::from_wire(key),
            cost,
            plan,
            want,
        })
}

fn from() -> impl Strategy<Value = Option<AnsweredFrom>> {
    prop_oneof![
        Just(None),
        Just(Some(AnsweredFrom::Pool)),
        Just(Some(AnsweredFrom::Store))
    ]
}

fn answer() -> impl Strategy<Value = LeaseAnswer> {
    prop_oneof![
        (
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            any::<bool>(),
            from(),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(
                |(tokens, ttl_ms, remaining, reset_ms, local, from, next_ask_ms)| {
                    LeaseAnswer::Grant {
                        tokens,
                        ttl_ms,
                        remaining,
                        reset_ms,
                        local,
                        from,
                        next_ask_ms,
                    }
                }
            ),
        (any::<u64>(), any::<bool>(), from()).prop_map(|(retry_after_ms, local, from)| {
            LeaseAnswer::Deny {
                retry_after_ms,
                local,
                from,
            }
        }),
        text().prop_map(|reason| LeaseAnswer::Unavailable { reason }),
    ]
}

fn response() -> impl Strategy<Value = LeaseResponse> {
    (any::<u32>(), proptest::collection::vec(answer(), 0..4))
        .prop_map(|(v, items)| LeaseResponse { v, items })
}

/// Any JSON value, for the fields a reader skips.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(text(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// `response` as serde_json writes it, with an unknown field of value `extra`
/// in it and in each answer.
fn with_unknown_fields(response: &LeaseResponse, extra: &Value) -> Vec<u8> {
    let mut tree = serde_json::to_value(response).unwrap();
    if let Some(items) = tree.get_mut("items").and_then(Value::as_array_mut) {
        for a in items {
            a.as_object_mut()
                .unwrap()
                .insert("hint".into(), extra.clone());
        }
    }
    tree.as_object_mut()
        .unwrap()
        .insert("later".into(), extra.clone());
    serde_json::to_vec_pretty(&tree).unwrap()
}

proptest! {
    #[test]
    fn any_request_is_written_as_serde_json_writes_it(
        rules_version in text(),
        items in proptest::collection::vec(item(), 0..4),
    ) {
        let request = LeaseRequest { v: WIRE_VERSION, rules_version: rules_version.clone(), items: items.clone() };
        prop_assert_eq!(
            String::from_utf8(write_lease_request(&rules_version, &items)).unwrap(),
            serde_json::to_string(&request).unwrap()
        );
    }

    #[test]
    fn any_answer_serde_json_writes_reads_back(response in response(), extra in value()) {
        for body in [
            serde_json::to_vec(&response).unwrap(),
            serde_json::to_vec_pretty(&response).unwrap(),
            with_unknown_fields(&response, &extra),
        ] {
            prop_assert_eq!(read_lease_response(&body), Ok(response.clone()));
            prop_assert_eq!(serde(&body), Some(response.clone()));
        }
    }

    #[test]
    fn any_bytes_give_an_error_or_what_serde_json_reads(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
        if let Ok(read) = read_lease_response(&bytes) {
            prop_assert_eq!(Some(read), serde(&bytes));
        }
    }

    #[test]
    fn a_body_cut_or_with_a_byte_changed_reads_as_serde_json_reads_it(
        response in response(),
        extra in value(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let mut body = with_unknown_fields(&response, &extra);
        let i = at.index(body.len());
        if cut {
            body.truncate(i);
        } else {
            body[i] = byte;
        }
        prop_assert_eq!(read_lease_response(&body).ok(), serde(&body), "{}", String::from_utf8_lossy(&body));
    }
}

/// A response the agent can write in its compact form: no `unavailable`
/// answer (its reason is read a member at a time).
fn as_written() -> impl Strategy<Value = LeaseResponse> {
    response().prop_map(|mut r| {
        r.items
            .retain(|a| !matches!(a, LeaseAnswer::Unavailable { .. }));
        r
    })
}

proptest! {
    #[test]
    fn an_answer_as_the_agent_writes_it_is_matched_whole_to_the_same_value(response in as_written()) {
        let body = serde_json::to_vec(&response).unwrap();
        prop_assert_eq!(read_as_written(&body), Some(response.clone()));
        prop_assert_eq!(read_any(&body), Ok(response));
    }

    #[test]
    fn an_answer_as_written_cut_or_changed_reads_as_serde_json_reads_it(
        response in as_written(),
        at in any::<prop::sample::Index>(),
        byte in prop_oneof![any::<u8>(), Just(b'0'), Just(b'9'), Just(b' '), Just(b'}'), Just(b',')],
        cut in any::<bool>(),
    ) {
        let mut body = serde_json::to_vec(&response).unwrap();
        let i = at.index(body.len());
        if cut {
            body.truncate(i);
        } else {
            body[i] = byte;
        }
        if let Some(matched) = read_as_written(&body) {
            prop_assert_eq!(read_any(&body), Ok(matched), "{}", String::from_utf8_lossy(&body));
        }
        prop_assert_eq!(read_lease_response(&body).ok(), serde(&body), "{}", String::from_utf8_lossy(&body));
    }
}

#[test]
fn numbers_serde_json_would_refuse_are_left_to_the_general_reader() {
    for body in [
        &br#"{"v":01,"items":[]}"#[..],
        br#"{"v":4294967296,"items":[]}"#,
        br#"{"v":1,"items":[{"result":"grant","tokens":4294967296,"ttl_ms":1,"remaining":1,"reset_ms":1}]}"#,
        br#"{"v":1,"items":[{"result":"deny","retry_after_ms":18446744073709551616}]}"#,
        br#"{"v":1,"items":[{"result":"deny","retry_after_ms":}]}"#,
    ] {
        assert_eq!(read_as_written(body), None, "{}", String::from_utf8_lossy(body));
        assert!(read_lease_response(body).is_err());
    }
    let max = br#"{"v":1,"items":[{"result":"deny","retry_after_ms":18446744073709551615}]}"#;
    assert!(read_as_written(max).is_some());
}

#[test]
fn the_agents_answers_read_back() {
    let response = LeaseResponse {
        v: WIRE_VERSION,
        items: answers(),
    };
    let body = serde_json::to_vec(&response).unwrap();
    assert_eq!(read_lease_response(&body), Ok(response));
}

#[test]
fn what_serde_json_refuses_is_refused() {
    for body in [
        "",
        "{}",
        r#"{"v":1}"#,
        r#"{"items":[]}"#,
        r#"{"v":1,"items":[],"v":1}"#,
        r#"{"v":1,"items":[]} x"#,
        r#"{"v":-1,"items":[]}"#,
        r#"{"v":1.0,"items":[]}"#,
        r#"{"v":01,"items":[]}"#,
        r#"{"v":4294967296,"items":[]}"#,
        r#"{"v":1,"items":[],}"#,
        r#"{"v":1,"items":[{"result":"grant"}]}"#,
        r#"{"v":1,"items":[{"result":"maybe"}]}"#,
        r#"{"v":1,"items":[{"result":"deny","retry_after_ms":1,"local":null}]}"#,
        r#"{"v":1,"items":[{"result":"deny","retry_after_ms":1,"from":"elsewhere"}]}"#,
        r#"{"v":1,"items":[{"result":"unavailable","reason":"\ud800"}]}"#,
        r#"{"v":1,"items":[{"result":"unavailable","reason":"a"}],"x":"\q"}"#,
        r#"{"v":1,"items":[{"result":"unavailable","reason":"a"}],"x":01}"#,
        "{\"v\":1,\"items\":[{\"result\":\"unavailable\",\"reason\":\"\u{1}\"}]}",
    ] {
        assert!(serde(body.as_bytes()).is_none(), "serde_json takes {body}");
        assert!(read_lease_response(body.as_bytes()).is_err(), "{body}");
    }
}

#[test]
fn escapes_and_deep_unknown_values_read_as_serde_json_reads_them() {
    let deep = format!(
        r#"{{"v":1,"x":{}1{},"items":[{{"result":"unavailable","reason":"\u00e9\ud83d\ude00\n\/"}}]}}"#,
        "[".repeat(500),
        "]".repeat(500)
    );
    let read = read_lease_response(deep.as_bytes());
    assert_eq!(read.clone().ok(), serde(deep.as_bytes()));
    assert_eq!(
        read.map(|r| r.items),
        Ok(vec![LeaseAnswer::Unavailable {
            reason: "é😀\n/".into()
        }])
    );
    // A skipped string's bytes are not checked, as serde_json does not.
    let body = b"{\"v\":1,\"items\":[],\"x\":\"\xff\"}";
    assert_eq!(read_lease_response(body).ok(), serde(body));
    assert!(serde(body).is_some());
}

#[test]
fn representative_requests_are_written_byte_for_byte_as_before() {
    let item = |rule: &str, key: &str, cost, plan: Option<&str>, want| LeaseItem {
        rule: rule.into(),
        key: DescriptorKey::from_wire(key.into()),
        cost,
        plan: plan.map(str::to_string),
        want,
    };
    // A new key's call: one item, as the filter's wasm-cost run sends it.
    let one = [item("bench-hot", "bench-hot|key-7", 1, None, Some(2))];
    assert_eq!(
        String::from_utf8(write_lease_request("r-7f3a", &one)).unwrap(),
        r#"{"v":1,"rules_version":"r-7f3a","items":[{"rule":"bench-hot","key":"bench-hot|key-7","cost":1,"want":2}]}"#
    );
    // Escapes in keys, a plan, several items, an empty version.
    let many = [
        item("api", "api|a\"b\\c", 3, Some("gold"), None),
        item("api", "api|tab\there\u{1}|caf\u{e9}|%7C", 1, None, None),
        item(
            "q\"r",
            "q\"r|\u{7f}",
            u32::MAX,
            Some("p\\n"),
            Some(u32::MAX),
        ),
    ];
    let written = String::from_utf8(write_lease_request("", &many)).unwrap();
    assert_eq!(
        written,
        concat!(
            r#"{"v":1,"rules_version":"","items":["#,
            r#"{"rule":"api","key":"api|a\"b\\c","cost":3,"plan":"gold"},"#,
            r#"{"rule":"api","key":"api|tab\there\u0001|café|%7C","cost":1},"#,
            "{\"rule\":\"q\\\"r\",\"key\":\"q\\\"r|\u{7f}\",\"cost\":4294967295,",
            r#""plan":"p\\n","want":4294967295}]}"#
        )
    );
    for (version, items) in [("r-7f3a", &one[..]), ("", &many[..]), ("v\"1", &many[1..])] {
        let request = LeaseRequest {
            v: WIRE_VERSION,
            rules_version: version.into(),
            items: items.to_vec(),
        };
        assert_eq!(
            write_lease_request(version, items),
            serde_json::to_vec(&request).unwrap()
        );
    }
}

#[test]
fn a_request_written_into_a_kept_buffer_is_the_same_bytes() {
    let item = |key: &str| LeaseItem {
        rule: "r".into(),
        key: DescriptorKey::from_wire(key.into()),
        cost: 1,
        plan: None,
        want: None,
    };
    let long = [item("r|a-long-key-of-a-first-call"), item("r|b")];
    let short = [item("r|c")];
    let mut kept = String::new();
    write_lease_request_into(&mut kept, "v1", &long);
    assert_eq!(kept.as_bytes(), write_lease_request("v1", &long));
    write_lease_request_into(&mut kept, "v2", &short);
    assert_eq!(kept.as_bytes(), write_lease_request("v2", &short));
}
