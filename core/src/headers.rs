//! Response fields: Retry-After, the IETF RateLimit / RateLimit-Policy fields
//! (draft-ietf-httpapi-ratelimit-headers, structured-field form:
//! `"name";q=100;w=60` and `"name";r=0;t=30`), or the legacy X-RateLimit-* trio.

use serde::{Deserialize, Serialize};

use crate::decision::Quota;
use crate::digits::{Decimal, HEX_LOWER};
use crate::header_list::HeaderList;
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

/// The quota fields for `quota` in `style`, as a list of their own (the
/// tests read them so).
#[cfg(test)]
pub fn quota_fields(style: HeaderStyle, quota: &Quota<'_>) -> Vec<(&'static str, String)> {
    let mut fields = Vec::with_capacity(3);
    write_quota_fields(style, quota, |name, value| {
        fields.push((name, value.to_string()))
    });
    fields
}

/// Hands each quota field for `quota` in `style` to `emit`, in order. The
/// IETF fields are written into one buffer, reused: an allowed response's two
/// fields cost one allocation, where a list of owned fields costs one each and
/// one more for the list.
pub fn write_quota_fields(
    style: HeaderStyle,
    quota: &Quota<'_>,
    mut emit: impl FnMut(&'static str, &str),
) {
    match style {
        HeaderStyle::Ietf => {
            let mut field = String::with_capacity(IETF_FIELD_ROOM + quota.rule.len());
            write_policy_value(&mut field, quota.rule, &quota.limit);
            emit("ratelimit-policy", &field);
            field.clear();
            write_ratelimit_value(&mut field, quota);
            emit("ratelimit", &field);
        }
        HeaderStyle::Legacy => {
            let reset = quota.reset_ns.div_ceil(NANOS_PER_SEC);
            let limit = u64::from(quota.limit.requests());
            emit("x-ratelimit-limit", Decimal::of(limit).as_str());
            emit(
                "x-ratelimit-remaining",
                Decimal::of(u64::from(quota.remaining)).as_str(),
            );
            emit("x-ratelimit-reset", Decimal::of(reset).as_str());
        }
        HeaderStyle::Off => {}
    }
}

/// Room for an IETF field's value beside the rule's name: the quotes and two
/// parameters of at most 18 bytes each.
pub const IETF_FIELD_ROOM: usize = 48;

/// Appends the `ratelimit-policy` value of `rule` under `limit`
/// (`"name";q=100;w=60`): the same for every response the limit allows, so
/// a caller may keep it. It starts with the rule's name as
/// [`write_sf_string`] writes it, as the `ratelimit` value does.
pub fn write_policy_value(out: &mut String, rule: &str, limit: &Limit) {
    let (q, w) = limit.window_quota();
    write_structured(out, rule, [("q", q), ("w", w)]);
}

/// Appends the `ratelimit` value of `quota` (`"name";r=0;t=30`).
pub fn write_ratelimit_value(out: &mut String, quota: &Quota<'_>) {
    write_sf_string(out, quota.rule);
    write_ratelimit_params(out, quota);
}

/// Appends the `ratelimit` value's parameters (`;r=0;t=30`): the value
/// once its rule's name is written ([`write_sf_string`]).
pub fn write_ratelimit_params(out: &mut String, quota: &Quota<'_>) {
    // `push_param`'s bytes for the two keys, each written whole: every
    // allowed response writes them.
    let reset = quota.reset_ns.div_ceil(NANOS_PER_SEC);
    out.push_str(";r=");
    out.push_str(Decimal::of(u64::from(quota.remaining).min(SF_INTEGER_MAX)).as_str());
    out.push_str(";t=");
    out.push_str(Decimal::of(reset.min(SF_INTEGER_MAX)).as_str());
}

/// The fields of a 429 for `rule`, written straight into the list the proxy
/// is handed (one allocation, two for the IETF style's reused value buffer):
/// every rejection writes them.
pub fn rejection_fields(
    style: HeaderStyle,
    rule: &str,
    limit: &Limit,
    retry_after_ns: u64,
) -> HeaderList {
    let retry = retry_after_secs(retry_after_ns);
    let quota = Quota {
        rule,
        limit: *limit,
        remaining: 0,
        reset_ns: retry * NANOS_PER_SEC,
    };
    // Seven fields of about 10 bytes' framing each, the rule's name three
    // times, the numbers and the constant values.
    let mut fields = HeaderList::with_capacity(250 + 3 * rule.len());
    fields.push("retry-after", Decimal::of(retry).as_str());
    write_quota_fields(style, &quota, |name, value| fields.push(name, value));
    fields.push("x-envoy-ratelimited", "true");
    fields.push("x-meshlimit-rule", rule);
    fields.push("content-type", "application/json");
    fields
}

/// The JSON body of a 429, `{"error":"rate_limited","rule":…,"retry_after_seconds":…}`.
/// Written by hand rather than by serde: every rejection writes one. The
/// rule's name is escaped as JSON strings are (a test compares the bytes with
/// serde_json's for any name).
pub fn rejection_body(rule: &str, retry_after_ns: u64) -> String {
    let retry = Decimal::of(retry_after_secs(retry_after_ns));
    let mut body = String::with_capacity(64 + rule.len());
    body.push_str(r#"{"error":"rate_limited","rule":"#);
    push_json_string(&mut body, rule);
    body.push_str(r#","retry_after_seconds":"#);
    body.push_str(retry.as_str());
    body.push('}');
    body
}

/// `s` as a JSON string, escaped as serde_json escapes it.
pub(crate) fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    push_json_chars(out, s);
    out.push('"');
}

/// `s` escaped as serde_json escapes a string's characters, without the
/// quotes around them (a writer with text of its own on either side
/// writes them with it).
pub(crate) fn push_json_chars(out: &mut String, s: &str) {
    // Nearly every string has nothing to escape: tested whole, every byte
    // without an exit on the first to escape (see `plain_json`), then
    // copied at once.
    if plain_json(s.as_bytes()) {
        out.push_str(s);
    } else {
        push_json_escaped(out, s);
    }
}

/// [`push_json_string`]'s characters of a string with some to escape.
#[cold]
#[inline(never)]
fn push_json_escaped(out: &mut String, s: &str) {
    // Runs of characters written as they are, found by one scan each.
    let mut rest = s;
    while let Some(at) = rest
        .bytes()
        .position(|b| b == b'"' || b == b'\\' || b < 0x20)
    {
        // `at` is an ASCII byte's: both sides are whole characters.
        let (plain, special) = rest.split_at(at);
        out.push_str(plain);
        push_json_escape(out, special.as_bytes().first().copied().unwrap_or_default());
        rest = special.get(1..).unwrap_or_default();
    }
    out.push_str(rest);
}

/// Whether no byte of `s` is escaped in a JSON string (a quote, a backslash
/// or a control character). Every byte is tested, with no branch: the
/// compiler unrolls a scan that stops at the first such byte into a body
/// the Wasm interpreter charges whole at each turn (`make wasm-cost`).
fn plain_json(s: &[u8]) -> bool {
    s.iter()
        .map(|&b| usize::from((b < 0x20) | (b == b'"') | (b == b'\\')))
        .sum::<usize>()
        == 0
}

/// The escape of `b`, a quote, a backslash or a control character, as
/// serde_json writes it.
#[inline(never)]
fn push_json_escape(out: &mut String, b: u8) {
    match b {
        b'"' => out.push_str("\\\""),
        b'\\' => out.push_str("\\\\"),
        b'\n' => out.push_str("\\n"),
        b'\r' => out.push_str("\\r"),
        b'\t' => out.push_str("\\t"),
        0x08 => out.push_str("\\b"),
        0x0c => out.push_str("\\f"),
        _ => {
            let n = usize::from(b);
            out.push_str("\\u00");
            out.push(char::from(HEX_LOWER[n >> 4]));
            out.push(char::from(HEX_LOWER[n & 0xf]));
        }
    }
}

/// The fields and JSON body of a 503 from a fail-closed rule.
pub fn unavailable_response(rule: &str) -> (HeaderList, String) {
    let fields = HeaderList::from_pairs([
        ("retry-after", "1"),
        // A caller's Envoy (an Istio sidecar retries 503s by default) does not
        // retry a response carrying this, so a fail-closed rule is not retried
        // into the outage.
        ("x-envoy-ratelimited", "true"),
        ("x-meshlimit-rule", rule),
        ("content-type", "application/json"),
    ]);
    let body = serde_json::json!({"error": "limiter_unavailable", "rule": rule}).to_string();
    (fields, body)
}

/// The 400 a request gets when the rules cannot be applied to it as sent (a
/// header a rule keys on, sent twice).
pub fn bad_request_response(error: &crate::rules::RequestError) -> (HeaderList, String) {
    let fields = HeaderList::from_pairs([("content-type", "application/json")]);
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
        fields: HeaderList,
        body: String,
    },
    /// A trailers-only gRPC response: HTTP 200, `content-type: application/grpc`,
    /// `grpc-status: status`, `grpc-message: message` (percent-encoded) and
    /// `fields` as metadata, no body. The proxy writes the first three (Envoy's
    /// local reply to a gRPC request does); [`Answer::wire`] shows them all.
    Grpc {
        status: u32,
        message: String,
        fields: HeaderList,
    },
}

impl Answer {
    /// The HTTP status, header fields and body on the wire.
    pub fn wire(&self) -> (u32, Vec<(String, String)>, String) {
        match self {
            Answer::Http {
                status,
                fields,
                body,
            } => (*status, fields.to_strings(), body.clone()),
            Answer::Grpc {
                status,
                message,
                fields,
            } => {
                let mut wire = vec![
                    ("content-type".to_string(), "application/grpc".to_string()),
                    ("grpc-status".to_string(), status.to_string()),
                    ("grpc-message".to_string(), percent_encode(message)),
                ];
                wire.extend(fields.to_strings());
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
    fields: HeaderList,
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
            let fields =
                HeaderList::from_pairs(fields.iter().filter(|(name, _)| *name != "content-type"));
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

/// [`write_structured`]'s member as a string of its own, for the tests.
#[cfg(test)]
fn structured<const N: usize>(name: &str, params: [(&'static str, u64); N]) -> String {
    let mut out = String::new();
    write_structured(&mut out, name, params);
    out
}

/// Appends one member of a structured-field List (RFC 9651; a one-member List is written
/// as its Item): the rule's name as an sf-string with integer parameters, e.g.
/// `"search";r=0;t=30`. Written here by hand, not by a structured-field
/// library: it runs for every allowed response, and the library's builder cost
/// the filter more than the rest of the response's work. The RFC's rules it
/// keeps (each held by a test): a string escapes `"` and `\`, and one with a
/// character outside visible ASCII and space is written empty (none is: rule
/// names are `[a-z0-9._-]`); a key outside the key syntax is left out; a value
/// above the largest sf-integer (999,999,999,999,999) is written as that.
fn write_structured<const N: usize>(
    out: &mut String,
    name: &str,
    params: [(&'static str, u64); N],
) {
    write_sf_string(out, name);
    for (key, value) in params {
        if is_sf_key(key) {
            push_param(out, key, value);
        }
    }
}

/// Appends `name` as an sf-string ([`write_structured`]'s rules): quoted,
/// `"` and `\` escaped, empty with a character outside visible ASCII and
/// space.
pub fn write_sf_string(out: &mut String, name: &str) {
    out.push('"');
    if name
        .bytes()
        .all(|b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\')
    {
        // Every rule's name ([a-z0-9._-]): nothing to escape, copied whole.
        out.push_str(name);
    } else {
        push_escaped_sf_string(out, name);
    }
    out.push('"');
}

/// The inside of an sf-string that needs escaping (no rule's name does).
#[cold]
#[inline(never)]
fn push_escaped_sf_string(out: &mut String, name: &str) {
    if !name.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        return;
    }
    let mut rest = name;
    while let Some(at) = rest.find(['"', '\\']) {
        let (plain, escaped) = rest.split_at(at);
        let (one, after) = escaped.split_at(1);
        out.push_str(plain);
        out.push('\\');
        out.push_str(one);
        rest = after;
    }
    out.push_str(rest);
}

/// Appends `;key=value` (a key of the key syntax), the value at most the
/// largest sf-integer.
fn push_param(out: &mut String, key: &str, value: u64) {
    out.push(';');
    out.push_str(key);
    out.push('=');
    out.push_str(Decimal::of(value.min(SF_INTEGER_MAX)).as_str());
}

/// The largest sf-integer (15 decimal digits).
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// RFC 9651's key: a lowercase letter or `*`, then lowercase letters, digits,
/// `_`, `-`, `.` and `*`.
fn is_sf_key(key: &str) -> bool {
    let mut bytes = key.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'*')
        && bytes.all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'.' | b'*')
        })
}

#[cfg(test)]
mod tests;
