use serde_json::json;

use super::super::tests::answers;
use super::super::LeaseAnswer;

fn read(text: &str) -> Result<LeaseAnswer, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// `answer` as JSON with its fields in the reverse of the written order (the
/// tag last).
fn reversed(answer: &LeaseAnswer) -> String {
    let serde_json::Value::Object(fields) = serde_json::to_value(answer).unwrap() else {
        panic!("{answer:?} is not written as an object");
    };
    let mut fields: Vec<_> = fields.into_iter().collect();
    fields.reverse();
    let fields: Vec<String> = fields
        .iter()
        .map(|(name, value)| format!("{}:{value}", json!(name)))
        .collect();
    format!("{{{}}}", fields.join(","))
}

#[test]
fn what_the_agent_writes_reads_back_whatever_the_order_of_its_fields() {
    for answer in answers() {
        let text = serde_json::to_string(&answer).unwrap();
        assert_eq!(read(&text), Ok(answer.clone()), "{text}");
        let text = reversed(&answer);
        assert!(text.contains(r#""result":"#), "{text}");
        assert_eq!(read(&text), Ok(answer), "{text}");
    }
}

#[test]
fn unknown_fields_and_nulls_for_the_optional_ones_are_taken_as_before() {
    assert_eq!(
        read(r#"{"result":"deny","retry_after_ms":7,"from":null,"hint":{"a":[1,2]},"local":true}"#),
        Ok(LeaseAnswer::Deny {
            retry_after_ms: 7,
            local: true,
            from: None
        })
    );
    assert_eq!(
        read(
            r#"{"tokens":1,"ttl_ms":2,"remaining":3,"reset_ms":4,"next_ask_ms":null,"result":"grant"}"#
        ),
        Ok(LeaseAnswer::Grant {
            tokens: 1,
            ttl_ms: 2,
            remaining: 3,
            reset_ms: 4,
            local: false,
            from: None,
            next_ask_ms: None,
        })
    );
}

#[test]
fn a_missing_tag_or_field_a_field_sent_twice_and_an_unknown_result_are_refused() {
    for (text, error) in [
        (r#"{"retry_after_ms":7}"#, "missing field `result`"),
        (
            r#"{"result":"grant","tokens":1,"ttl_ms":2,"remaining":3}"#,
            "missing field `reset_ms`",
        ),
        (r#"{"result":"deny"}"#, "missing field `retry_after_ms`"),
        (r#"{"result":"unavailable"}"#, "missing field `reason`"),
        (
            r#"{"result":"deny","retry_after_ms":1,"retry_after_ms":2}"#,
            "duplicate field `retry_after_ms`",
        ),
        (
            r#"{"result":"deny","result":"grant","retry_after_ms":1}"#,
            "duplicate field `result`",
        ),
        (
            r#"{"result":"maybe","retry_after_ms":1}"#,
            "unknown variant `maybe`",
        ),
        (r#"{"result":"deny","retry_after_ms":-1}"#, "invalid value"),
        (r#"["deny",1]"#, "invalid type"),
    ] {
        let got = read(text);
        assert!(
            got.as_ref().is_err_and(|e| e.contains(error)),
            "{text}: {got:?}, expected an error with {error:?}"
        );
    }
}
