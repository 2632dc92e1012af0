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
                format!("\"{}\";r={};t={}", quota.rule, quota.remaining, reset),
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

fn policy(rule: &str, limit: &Limit) -> String {
    format!(
        "\"{rule}\";q={};w={}",
        limit.requests(),
        limit.window_secs()
    )
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
