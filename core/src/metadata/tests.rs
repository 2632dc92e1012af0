use super::*;

fn payload(claims: StructBuilder) -> Vec<u8> {
    StructBuilder::new()
        .with(JWT_PAYLOAD_FIELD, Field::Struct(claims))
        .encode()
}

fn read(path: &MetadataPath, ns: &[u8]) -> Option<String> {
    path.lookup(ns)
        .map(|v| String::from_utf8_lossy(&v).into_owned())
}

#[test]
fn a_claim_is_read_from_the_jwt_payload() {
    let ns = payload(
        StructBuilder::new()
            .with("sub", Field::String("alice".into()))
            .with("iss", Field::String("https://issuer".into())),
    );
    assert_eq!(
        read(&MetadataPath::claim("sub"), &ns).as_deref(),
        Some("alice")
    );
    assert_eq!(
        read(&MetadataPath::claim("iss"), &ns).as_deref(),
        Some("https://issuer")
    );
    assert_eq!(read(&MetadataPath::claim("plan"), &ns), None);
}

#[test]
fn numbers_have_one_spelling_and_equal_their_string() {
    let ns = |v: Field| payload(StructBuilder::new().with("tier", v));
    let tier = MetadataPath::claim("tier");
    assert_eq!(read(&tier, &ns(Field::Number(3.0))).as_deref(), Some("3"));
    assert_eq!(
        read(&tier, &ns(Field::String("3".into()))).as_deref(),
        Some("3")
    );
    assert_eq!(read(&tier, &ns(Field::Number(3.5))).as_deref(), Some("3.5"));
    assert_eq!(read(&tier, &ns(Field::Number(-0.0))).as_deref(), Some("0"));
    assert_eq!(
        read(&tier, &ns(Field::Number(1e21))).as_deref(),
        Some("1000000000000000000000")
    );
    assert_eq!(read(&tier, &ns(Field::Bool(true))).as_deref(), Some("true"));
}

#[test]
fn null_objects_and_lists_are_no_value() {
    let ns = payload(
        StructBuilder::new()
            .with("n", Field::Null)
            .with(
                "o",
                Field::Struct(StructBuilder::new().with("a", Field::Bool(true))),
            )
            .with("l", Field::List(vec![Field::String("a".into())])),
    );
    for name in ["n", "o", "l"] {
        assert_eq!(read(&MetadataPath::claim(name), &ns), None, "{name}");
    }
    // A path through a value that is not a Struct finds nothing.
    let through = MetadataPath {
        filter: JWT_AUTHN.into(),
        path: vec!["payload".into(), "l".into(), "a".into()],
    };
    assert_eq!(read(&through, &ns), None);
    let nested = MetadataPath {
        filter: JWT_AUTHN.into(),
        path: vec!["payload".into(), "o".into(), "a".into()],
    };
    assert_eq!(read(&nested, &ns).as_deref(), Some("true"));
}

#[test]
fn the_last_entry_of_a_repeated_name_wins() {
    let mut bytes = payload(StructBuilder::new().with("sub", Field::String("a".into())));
    bytes.extend(payload(
        StructBuilder::new().with("sub", Field::String("b".into())),
    ));
    // Two `payload` entries: protobuf keeps the last.
    assert_eq!(
        read(&MetadataPath::claim("sub"), &bytes).as_deref(),
        Some("b")
    );
}

#[test]
fn malformed_bytes_are_no_value() {
    let good = payload(StructBuilder::new().with("sub", Field::String("alice".into())));
    let sub = MetadataPath::claim("sub");
    for cut in 0..good.len() {
        // Every truncation is either no value or a shorter honest value, never a panic.
        if let Some(v) = read(&sub, &good[..cut]) {
            assert!("alice".starts_with(&v), "{v}");
        }
    }
    assert_eq!(read(&sub, &[0xff; 12]), None);
    assert_eq!(read(&sub, b"alice"), None);
}

#[test]
fn a_path_is_checked() {
    assert!(MetadataPath::claim("sub").check().is_ok());
    let empty = MetadataPath {
        filter: JWT_AUTHN.into(),
        path: vec![],
    };
    assert!(empty
        .check()
        .unwrap_err()
        .to_string()
        .contains("1 to 8 fields"));
    let deep = MetadataPath {
        filter: JWT_AUTHN.into(),
        path: vec!["a".into(); 9],
    };
    assert!(deep.check().is_err());
    let no_filter = MetadataPath {
        filter: String::new(),
        path: vec!["a".into()],
    };
    assert!(no_filter
        .check()
        .unwrap_err()
        .to_string()
        .contains("filter"));
    let blank = MetadataPath {
        filter: JWT_AUTHN.into(),
        path: vec!["payload".into(), String::new()],
    };
    assert!(blank.check().unwrap_err().to_string().contains("field"));
    // The bounds are inclusive: 8 fields and 128-byte names pass, one more not.
    let at_bounds = MetadataPath {
        filter: "f".repeat(MAX_NAME_LEN),
        path: vec!["a".repeat(MAX_NAME_LEN); MAX_DEPTH],
    };
    assert!(at_bounds.check().is_ok());
    let long_filter = MetadataPath {
        filter: "f".repeat(MAX_NAME_LEN + 1),
        ..at_bounds.clone()
    };
    assert!(long_filter
        .check()
        .unwrap_err()
        .to_string()
        .contains("filter"));
    let long_field = MetadataPath {
        filter: JWT_AUTHN.into(),
        path: vec!["a".repeat(MAX_NAME_LEN + 1)],
    };
    assert!(long_field
        .check()
        .unwrap_err()
        .to_string()
        .contains("field"));
    let control = MetadataPath {
        filter: "f\u{7}".into(),
        path: vec!["a".into()],
    };
    assert!(control.check().is_err());
}

#[test]
fn only_the_jwt_filters_payload_is_a_claim() {
    assert_eq!(
        MetadataPath::claim("sub").as_claim().as_deref(),
        Some("sub")
    );
    let other_filter = MetadataPath {
        filter: "my.filter".into(),
        path: vec![JWT_PAYLOAD_FIELD.into(), "sub".into()],
    };
    assert_eq!(other_filter.as_claim(), None);
    let other_field = MetadataPath {
        filter: JWT_AUTHN.into(),
        path: vec!["header".into(), "sub".into()],
    };
    assert_eq!(other_field.as_claim(), None);
}

#[test]
fn claim_is_the_jwt_payload_path() {
    let c = MetadataPath::claim("sub");
    assert_eq!(c.filter, "envoy.filters.http.jwt_authn");
    assert_eq!(c.path, ["payload", "sub"]);
    assert_eq!(c.as_claim().as_deref(), Some("sub"));
    assert_eq!(c.describe(), "claim `sub`");
    let other = MetadataPath {
        filter: "acme.authn".into(),
        path: vec!["user".into()],
    };
    assert_eq!(other.as_claim(), None);
    assert_eq!(other.describe(), "metadata `acme.authn.user`");
}

proptest::proptest! {
    /// Whatever the bytes, the decoder answers (no panic, no hang).
    #[test]
    fn any_bytes_are_read_without_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
        let _ = MetadataPath::claim("sub").lookup(&bytes);
    }

    /// A string claim reads back as itself; a number as its one spelling, which
    /// reads back as the same number.
    #[test]
    fn values_read_back(s in ".{0,40}", n in proptest::num::f64::NORMAL | proptest::num::f64::ZERO | proptest::num::f64::SUBNORMAL) {
        let ns = payload(StructBuilder::new().with("s", Field::String(s.clone())).with("n", Field::Number(n)));
        proptest::prop_assert_eq!(read(&MetadataPath::claim("s"), &ns), Some(s));
        let text = read(&MetadataPath::claim("n"), &ns).unwrap_or_default();
        let back: f64 = text.parse().unwrap_or(f64::NAN);
        proptest::prop_assert!(back == n, "{} -> {}", n, text);
    }
}

#[test]
fn a_filters_namespace_is_found_in_the_metadata() {
    let jwt = payload(StructBuilder::new().with("sub", Field::String("alice".into())));
    let other = StructBuilder::new()
        .with("sub", Field::String("eve".into()))
        .encode();
    let all = encode_metadata(&[
        ("acme.authn".into(), other.clone()),
        (JWT_AUTHN.into(), jwt.clone()),
    ]);
    assert_eq!(namespace(&all, JWT_AUTHN), Some(jwt.as_slice()));
    assert_eq!(namespace(&all, "acme.authn"), Some(other.as_slice()));
    assert_eq!(namespace(&all, "envoy.filters.http.rbac"), None);
    assert_eq!(namespace(b"\xff\xff", JWT_AUTHN), None);
}

/// What Envoy 1.40 gave for property `metadata` behind jwt_authn with
/// `payload_in_metadata: payload` and a token of claims iss, sub and exp.
#[test]
fn envoys_own_bytes_are_read() {
    let mut bytes = vec![10, 121, 10, 28];
    bytes.extend_from_slice(JWT_AUTHN.as_bytes());
    bytes.extend_from_slice(&[18, 89, 10, 87, 10, 7]);
    bytes.extend_from_slice(b"payload");
    bytes.extend_from_slice(&[18, 76, 42, 74, 10, 16, 10, 3]);
    bytes.extend_from_slice(b"exp");
    bytes.extend_from_slice(&[18, 9, 17, 0, 0, 0, 44, 168, 195, 218, 65, 10, 14, 10, 3]);
    bytes.extend_from_slice(b"sub");
    bytes.extend_from_slice(&[18, 7, 26, 5]);
    bytes.extend_from_slice(b"alice");
    bytes.extend_from_slice(&[10, 38, 10, 3]);
    bytes.extend_from_slice(b"iss");
    bytes.extend_from_slice(&[18, 31, 26, 29]);
    bytes.extend_from_slice(b"https://issuer.meshlimit.test");
    let ns = namespace(&bytes, JWT_AUTHN).unwrap();
    assert_eq!(
        read(&MetadataPath::claim("sub"), ns).as_deref(),
        Some("alice")
    );
    assert_eq!(
        read(&MetadataPath::claim("iss"), ns).as_deref(),
        Some("https://issuer.meshlimit.test")
    );
    assert_eq!(
        read(&MetadataPath::claim("exp"), ns).as_deref(),
        Some("1796120752")
    );
}

#[test]
fn a_value_is_the_last_member_of_its_oneof_set() {
    // A string, then a list: a list (no value), not the string.
    assert!(matches!(
        decode_value(&[0x1a, 1, b'x', 0x32, 0]),
        Some(Value::List)
    ));
    // A list, then a string: the string.
    assert!(matches!(
        decode_value(&[0x32, 0, 0x1a, 1, b'x']),
        Some(Value::String(b"x"))
    ));
}

#[test]
fn setting_a_second_field_of_a_nested_struct_keeps_the_first() {
    let mut b = StructBuilder::new();
    b.set_path(
        &["payload".into(), "sub".into()],
        Field::String("alice".into()),
    );
    b.set_path(
        &["payload".into(), "plan".into()],
        Field::String("pro".into()),
    );
    let ns = b.encode();
    assert_eq!(read(&MetadataPath::claim("sub"), &ns), Some("alice".into()));
    assert_eq!(read(&MetadataPath::claim("plan"), &ns), Some("pro".into()));
}

#[test]
fn a_dotted_claim_is_nested_and_a_url_named_claim_is_refused() {
    let c = MetadataPath::claim("org.id");
    assert_eq!(c.path, ["payload", "org", "id"]);
    assert_eq!(c.as_claim().as_deref(), Some("org.id"));
    assert_eq!(c.describe(), "claim `org.id`");
    assert!(c.check().is_ok());
    // A literal dotted name is the metadata form, and stays one.
    let literal = MetadataPath {
        filter: JWT_AUTHN.into(),
        path: vec![JWT_PAYLOAD_FIELD.into(), "org.id".into()],
    };
    assert_eq!(literal.as_claim(), None);
    assert!(literal.check().is_ok());
    // A URL-named claim split at its dots would never match: refused.
    let url = MetadataPath::claim("https://example.com/plan");
    let e = url.check().unwrap_err().to_string();
    assert!(
        e.contains("path: [payload, \"https://example.com/plan\"]"),
        "{e}"
    );
    assert!(MetadataPath::claim("org..id").check().is_err());
    // The nested claim is read where the token's JSON puts it.
    let ns = payload(StructBuilder::new().with(
        "org",
        Field::Struct(StructBuilder::new().with("id", Field::String("7".into()))),
    ));
    assert_eq!(read(&c, &ns).as_deref(), Some("7"));
    assert_eq!(read(&literal, &ns), None);
}
