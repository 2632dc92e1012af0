//! Response fields: Retry-After, the IETF RateLimit / RateLimit-Policy fields
//! (draft-ietf-httpapi-ratelimit-headers, structured-field form:
//! `"name";q=100;w=60` and `"name";r=0;t=30`), or the legacy X-RateLimit-* trio.

use serde::{Deserialize, Serialize};

use crate::decision::Quota;
use crate::limit::Limit;
use crate::NANOS_PER_SEC;

/// Which quota fields responses carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeaderStyle {
    /// `ratelimit-policy` and `ratelimit`.
    #[default]
    Ietf,
    /// `x-ratelimit-limit`, `x-ratelimit-remaining`, `x-ratelimit-reset`.
    Legacy,
    /// No quota fields (429s still carry retry-after and the rule name).
    Off,
}

/// Whole seconds, rounded up, at least 1: Retry-After never says "now".
pub fn retry_after_secs(ns: u64) -> u64 {
    ns.div_ceil(NANOS_PER_SEC).max(1)
}

/// The quota fields for `quota` in `style`.
pub fn quota_fields(style: HeaderStyle, quota: &Quota<'_>) -> Vec<(&'static str, String)> {
    let reset = quota.reset_ns.div_ceil(NANOS_PER_SEC);
    match style {
        HeaderStyle::Ietf => vec![
            ("ratelimit-policy", policy(quota.rule, &quota.limit)),
            (
                "ratelimit",
                structured(
                    quota.rule,
                    [("r", u64::from(quota.remaining)), ("t", reset)],
                ),
            ),
        ],
        HeaderStyle::Legacy => vec![
            ("x-ratelimit-limit", quota.limit.requests().to_string()),
            ("x-ratelimit-remaining", quota.remaining.to_string()),
            ("x-ratelimit-reset", reset.to_string()),
        ],
        HeaderStyle::Off => Vec::new(),
    }
}

/// The fields of a 429 for `rule`.
pub fn rejection_fields(
    style: HeaderStyle,
    rule: &str,
    limit: &Limit,
    retry_after_ns: u64,
) -> Vec<(&'static str, String)> {
    let retry = retry_after_secs(retry_after_ns);
    let quota = Quota {
        rule,
        limit: *limit,
        remaining: 0,
        reset_ns: retry * NANOS_PER_SEC,
    };
    let mut fields = vec![("retry-after", retry.to_string())];
    fields.extend(quota_fields(style, &quota));
    fields.push(("x-envoy-ratelimited", "true".to_string()));
    fields.push(("x-meshlimit-rule", rule.to_string()));
    fields.push(("content-type", "application/json".to_string()));
    fields
}

/// The JSON body of a 429.
pub fn rejection_body(rule: &str, retry_after_ns: u64) -> String {
    #[derive(Serialize)]
    struct Body<'a> {
        error: &'static str,
        rule: &'a str,
        retry_after_seconds: u64,
    }
    let body = Body {
        error: "rate_limited",
        rule,
        retry_after_seconds: retry_after_secs(retry_after_ns),
    };
    serde_json::to_string(&body).unwrap_or_default()
}

/// The fields and JSON body of a 503 from a fail-closed rule.
pub fn unavailable_response(rule: &str) -> (Vec<(&'static str, String)>, String) {
    let fields = vec![
        ("retry-after", "1".to_string()),
        // A caller's Envoy (an Istio sidecar retries 503s by default) does not
        // retry a response carrying this, so a fail-closed rule is not retried
        // into the outage.
        ("x-envoy-ratelimited", "true".to_string()),
        ("x-meshlimit-rule", rule.to_string()),
        ("content-type", "application/json".to_string()),
    ];
    let body = serde_json::json!({"error": "limiter_unavailable", "rule": rule}).to_string();
    (fields, body)
}

/// The 400 a request gets when the rules cannot be applied to it as sent (a
/// header a rule keys on, sent twice).
pub fn bad_request_response(
    error: &crate::rules::RequestError,
) -> (Vec<(&'static str, String)>, String) {
    let fields = vec![("content-type", "application/json".to_string())];
    let body =
        serde_json::json!({"error": "ambiguous_request", "detail": error.to_string()}).to_string();
    (fields, body)
}

/// How a request wants its answer: plain HTTP, or gRPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http,
    /// `content-type: application/grpc`, `application/grpc+proto`,
    /// `application/grpc;…` (as Envoy tells gRPC apart; gRPC-Web is not gRPC).
    Grpc,
}

impl Protocol {
    /// The protocol of a request with this `content-type` value (if any).
    pub fn of_content_type(value: Option<&[u8]>) -> Protocol {
        const GRPC: &[u8] = b"application/grpc";
        let Some(v) = value else {
            return Protocol::Http;
        };
        let is_grpc = v
            .get(..GRPC.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(GRPC))
            && matches!(v.get(GRPC.len()), None | Some(b'+' | b';'));
        if is_grpc {
            Protocol::Grpc
        } else {
            Protocol::Http
        }
    }
}

/// gRPC status codes meshlimit answers with.
pub mod grpc_status {
    pub const INVALID_ARGUMENT: u32 = 3;
    pub const RESOURCE_EXHAUSTED: u32 = 8;
    pub const UNAVAILABLE: u32 = 14;
}

/// A local answer to a request, in its protocol's form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// An HTTP response.
    Http {
        status: u32,
        fields: Vec<(&'static str, String)>,
        body: String,
    },
    /// A trailers-only gRPC response: HTTP 200, `content-type: application/grpc`,
    /// `grpc-status: status`, `grpc-message: message` (percent-encoded) and
    /// `fields` as metadata, no body. The proxy writes the first three (Envoy's
    /// local reply to a gRPC request does); [`Answer::wire`] shows them all.
    Grpc {
        status: u32,
        message: String,
        fields: Vec<(&'static str, String)>,
    },
}

impl Answer {
    /// The HTTP status, header fields and body on the wire.
    pub fn wire(&self) -> (u32, Vec<(&'static str, String)>, String) {
        match self {
            Answer::Http {
                status,
                fields,
                body,
            } => (*status, fields.clone(), body.clone()),
            Answer::Grpc {
                status,
                message,
                fields,
            } => {
                let mut wire = vec![
                    ("content-type", "application/grpc".to_string()),
                    ("grpc-status", status.to_string()),
                    ("grpc-message", percent_encode(message)),
                ];
                wire.extend(fields.iter().cloned());
                (200, wire, String::new())
            }
        }
    }
}

/// gRPC's percent-encoding of `grpc-message`: bytes outside 0x20–0x7E, and `%`.
fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One answer in the request's protocol: HTTP `status` with `fields` and
/// `body`, or gRPC `grpc` with `message` and the same fields (less the HTTP
/// body's content type: a gRPC answer has its own).
fn answer(
    protocol: Protocol,
    (status, grpc): (u32, u32),
    mut fields: Vec<(&'static str, String)>,
    body: impl FnOnce() -> String,
    message: impl FnOnce() -> String,
) -> Answer {
    match protocol {
        Protocol::Http => Answer::Http {
            status,
            fields,
            body: body(),
        },
        Protocol::Grpc => {
            fields.retain(|(name, _)| *name != "content-type");
            Answer::Grpc {
                status: grpc,
                message: message(),
                fields,
            }
        }
    }
}

/// The answer to a request `rule` rejects: a 429 with a JSON body, or for gRPC
/// RESOURCE_EXHAUSTED with the same fields.
pub fn rejection(
    protocol: Protocol,
    style: HeaderStyle,
    rule: &str,
    limit: &Limit,
    retry_after_ns: u64,
) -> Answer {
    answer(
        protocol,
        (429, grpc_status::RESOURCE_EXHAUSTED),
        rejection_fields(style, rule, limit, retry_after_ns),
        || rejection_body(rule, retry_after_ns),
        || {
            format!(
                "rate limited by rule {rule}; retry after {} s",
                retry_after_secs(retry_after_ns)
            )
        },
    )
}

/// The answer to a request a fail-closed `rule` could not decide: a 503, or for
/// gRPC UNAVAILABLE with the same fields.
pub fn unavailable(protocol: Protocol, rule: &str) -> Answer {
    let (fields, body) = unavailable_response(rule);
    answer(
        protocol,
        (503, grpc_status::UNAVAILABLE),
        fields,
        || body,
        || format!("rate limiter unavailable; rule {rule} fails closed"),
    )
}

/// The answer to a request the rules cannot be applied to as sent: a 400, or
/// for gRPC INVALID_ARGUMENT.
pub fn bad_request(protocol: Protocol, error: &crate::rules::RequestError) -> Answer {
    let (fields, body) = bad_request_response(error);
    answer(
        protocol,
        (400, grpc_status::INVALID_ARGUMENT),
        fields,
        || body,
        || format!("ambiguous request: {error}"),
    )
}

fn policy(rule: &str, limit: &Limit) -> String {
    let (q, w) = limit.window_quota();
    structured(rule, [("q", q), ("w", w)])
}

/// One member of a structured-field List (RFC 9651; a one-member List is written
/// as its Item): the rule's name as an sf-string with integer parameters, e.g.
/// `"search";r=0;t=30`. The `sfv` crate writes it, so the string escaping, the
/// key syntax and the integer range are the RFC's. A value above the largest
/// sf-integer (999,999,999,999,999) is written as that; a rule name that is not
/// an sf-string (none is: names are `[a-z0-9._-]`) is written as an empty one.
fn structured<const N: usize>(name: &str, params: [(&'static str, u64); N]) -> String {
    let name = sfv::StringRef::from_str(name).unwrap_or(sfv::StringRef::EMPTY);
    let mut item = sfv::ItemSerializer::new().bare_item(name);
    for (key, value) in params {
        let value = sfv::Integer::try_from(value).unwrap_or(sfv::Integer::MAX);
        // Our keys are constants of the RFC's key syntax; a key that is not
        // would be left out, never panic.
        if let Ok(key) = sfv::KeyRef::from_str(key) {
            item = item.parameter(key, value);
        }
    }
    item.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::limit;

    #[test]
    fn a_rejection_reads_as_the_contract_shows() {
        let l = limit(100, NANOS_PER_SEC, 100);
        let f = rejection_fields(HeaderStyle::Ietf, "search-per-api-key", &l, 300_000_000);
        let get = |n: &str| f.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("retry-after"), Some("1"));
        assert_eq!(
            get("ratelimit-policy"),
            Some("\"search-per-api-key\";q=100;w=1")
        );
        assert_eq!(get("ratelimit"), Some("\"search-per-api-key\";r=0;t=1"));
        assert_eq!(get("x-envoy-ratelimited"), Some("true"));
        assert_eq!(get("x-meshlimit-rule"), Some("search-per-api-key"));
        assert_eq!(
            rejection_body("search-per-api-key", 300_000_000),
            r#"{"error":"rate_limited","rule":"search-per-api-key","retry_after_seconds":1}"#
        );
    }

    #[test]
    fn a_sub_second_policy_advertises_the_rate_it_enforces() {
        let l = limit(5, 250_000_000, 5);
        let f = rejection_fields(HeaderStyle::Ietf, "r", &l, 1);
        let get = |n: &str| f.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("ratelimit-policy"), Some("\"r\";q=20;w=1"));
        let l = limit(5, 1_500_000_000, 5);
        let f = rejection_fields(HeaderStyle::Ietf, "r", &l, 1);
        let get = |n: &str| f.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
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
        let get = |n: &str| f.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
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
            rejection_fields(HeaderStyle::Ietf, "r", &l, 300_000_000)
        );
        assert_eq!(body, rejection_body("r", 300_000_000));
        let (fields, body) = unavailable_response("r");
        assert_eq!(unavailable(Protocol::Http, "r").wire(), (503, fields, body));
        let e = crate::rules::RequestError::RepeatedHeader("x-api-key".into());
        let (fields, body) = bad_request_response(&e);
        assert_eq!(bad_request(Protocol::Http, &e).wire(), (400, fields, body));
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
        fn expect(v: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
            v.iter().map(|(k, v)| (*k, (*v).to_string())).collect()
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
            [
                ("retry-after", "1".to_string()),
                ("x-envoy-ratelimited", "true".to_string()),
                ("x-meshlimit-rule", "r".to_string()),
                ("content-type", "application/json".to_string()),
            ]
        );
        assert_eq!(body, r#"{"error":"limiter_unavailable","rule":"r"}"#);
        let e = crate::rules::RequestError::RepeatedHeader("x-api-key".into());
        let (fields, body) = bad_request_response(&e);
        assert_eq!(fields, [("content-type", "application/json".to_string())]);
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
            quota_fields(HeaderStyle::Legacy, &q)[0],
            ("x-ratelimit-limit", "5".into())
        );
        assert!(quota_fields(HeaderStyle::Off, &q).is_empty());
    }
}
