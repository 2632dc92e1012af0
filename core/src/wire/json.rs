//! The lease call's two bodies, written and read by hand: the filter makes a
//! lease call for every new key, and serde_json's generic writer and reader
//! were most of that request's Wasm work (`make wasm-cost`). The types stay
//! those of [`super`], whose serde forms the agent uses; tests hold the two
//! codecs together (any request writes serde_json's bytes, any answer
//! serde_json writes reads back equal, any bytes give a value serde_json
//! gives too, or an error).
//!
//! The reader takes what serde_json takes for a [`LeaseResponse`] (fields in
//! any order, unknown ones skipped whatever their value, whitespace anywhere,
//! escapes in strings and names; a field twice, a missing one, an unknown
//! `result` or `from`, a number that is negative, fractional or too large
//! refused) but for two forms serde accepts and no agent writes: the
//! response as an array of its fields, and an enum value as a one-field
//! object (`{"grant":null}`). Memory: the answers, and a byte a level while
//! skipping a nested unknown value (at most the body's length).

use std::borrow::Cow;

use super::{AnsweredFrom, LeaseAnswer, LeaseFields, LeaseResponse, WIRE_VERSION};
use crate::digits::Decimal;
use crate::headers::push_json_chars;

/// Why a lease answer body could not be read: what was wrong, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("lease answer: {what} at byte {at}")]
pub struct ReadError {
    pub at: usize,
    pub what: &'static str,
}

/// The JSON of a lease request of `items` under `rules_version`: the bytes
/// serde_json writes for the [`super::LeaseRequest`] (fields in declaration
/// order, `plan` and `want` only when set).
///
/// The fixed text around its fields is written in as few pieces as it
/// has: a string's quotes go with the names and punctuation beside them.
pub fn write_lease_request<T: LeaseFields>(rules_version: &str, items: &[T]) -> Vec<u8> {
    let mut out = String::with_capacity(64 + rules_version.len() + items.len() * 96);
    write_lease_request_into(&mut out, rules_version, items);
    out.into_bytes()
}

/// [`write_lease_request`] into `out` (emptied first), for a caller that
/// keeps one buffer for its calls.
pub fn write_lease_request_into<T: LeaseFields>(
    out: &mut String,
    rules_version: &str,
    items: &[T],
) {
    out.clear();
    out.reserve(64 + rules_version.len() + items.len() * 96);
    out.push_str(REQUEST_START);
    push_json_chars(out, rules_version);
    out.push_str("\",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        out.push_str(if i > 0 {
            ",{\"rule\":\""
        } else {
            "{\"rule\":\""
        });
        push_item(out, item);
    }
    out.push_str("]}");
}

/// What a lease request starts with: `v` ([`WIRE_VERSION`], checked below)
/// and the opening quote of `rules_version`.
const REQUEST_START: &str = "{\"v\":1,\"rules_version\":\"";
const _: () = assert!(WIRE_VERSION == 1, "REQUEST_START writes the wire version");

/// An item after its `{"rule":"`.
fn push_item(out: &mut String, item: &impl LeaseFields) {
    push_json_chars(out, item.rule());
    out.push_str("\",\"key\":\"");
    push_json_chars(out, item.key().as_str());
    out.push_str("\",\"cost\":");
    out.push_str(Decimal::of(u64::from(item.cost())).as_str());
    if let Some(plan) = item.plan() {
        out.push_str(",\"plan\":\"");
        push_json_chars(out, plan);
        out.push('"');
    }
    if let Some(want) = item.want() {
        out.push_str(",\"want\":");
        out.push_str(Decimal::of(u64::from(want)).as_str());
    }
    out.push('}');
}

/// Reads a lease call's answer body (see the module's notes on what it takes).
pub fn read_lease_response(body: &[u8]) -> Result<LeaseResponse, ReadError> {
    match read_as_written(body) {
        Some(response) => Ok(response),
        None => read_any(body),
    }
}

/// [`read_lease_response`] a member at a time: any form it takes.
fn read_any(body: &[u8]) -> Result<LeaseResponse, ReadError> {
    let mut r = Reader { b: body, at: 0 };
    let (mut v, mut items) = (None, None);
    r.object(|r, name| r.response_field(name, &mut v, &mut items))?;
    r.ws();
    if r.at < r.b.len() {
        return Err(r.error("trailing characters"));
    }
    Ok(LeaseResponse {
        v: u32::try_from(r.required(v)?).map_err(|_| r.error("`v` out of range"))?,
        items: r.required(items)?,
    })
}

/// The body as the agent writes it (serde_json's compact form: no
/// whitespace, fields in declaration order, `local` only when true, no
/// `unavailable` answer), read by matching its fixed parts byte for byte;
/// `None` for anything else, which the general reader then reads or refuses.
/// What this takes, the general reader reads to the same value: for a new
/// key's answer the general reader, a member and a dispatch on its name at a
/// time, cost the filter's Wasm about 11,000 instructions and this about a
/// quarter of that (`make wasm-cost`).
fn read_as_written(body: &[u8]) -> Option<LeaseResponse> {
    let mut r = Reader { b: body, at: 0 };
    r.lit(b"{\"v\":")?;
    let v = u32::try_from(r.plain_unsigned(U32)?).ok()?;
    r.lit(b",\"items\":[")?;
    let mut items = Vec::new();
    if r.lit(b"]").is_none() {
        loop {
            items.push(r.answer_as_written()?);
            if r.lit(b",").is_none() {
                r.lit(b"]")?;
                break;
            }
        }
    }
    r.lit(b"}")?;
    (r.at == body.len()).then_some(LeaseResponse { v, items })
}

/// Reads a field's value into `slot`, refusing a second one.
fn set<'a, T>(
    r: &mut Reader<'a>,
    slot: &mut Option<T>,
    read: impl FnOnce(&mut Reader<'a>) -> Result<T, ReadError>,
) -> Result<(), ReadError> {
    if slot.is_some() {
        return Err(r.error("a field sent twice"));
    }
    *slot = Some(read(r)?);
    Ok(())
}

/// Every field of any answer, as read so far.
#[derive(Default)]
struct Fields {
    result: Option<Kind>,
    tokens: Option<u64>,
    ttl_ms: Option<u64>,
    remaining: Option<u64>,
    reset_ms: Option<u64>,
    local: Option<bool>,
    from: Option<Option<AnsweredFrom>>,
    next_ask_ms: Option<Option<u64>>,
    retry_after_ms: Option<u64>,
    reason: Option<String>,
}

#[derive(Clone, Copy)]
enum Kind {
    Grant,
    Deny,
    Unavailable,
}

/// A place in the body.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

const U32: u64 = u32::MAX as u64;

/// The value of `digits` (ASCII digits), if it fits a `u64`.
#[cold]
#[inline(never)]
fn checked_decimal(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |n, &c| {
        n.checked_mul(10)?
            .checked_add(u64::from(c.wrapping_sub(b'0')))
    })
}

impl<'a> Reader<'a> {
    fn error(&self, what: &'static str) -> ReadError {
        ReadError { at: self.at, what }
    }

    fn required<T>(&self, value: Option<T>) -> Result<T, ReadError> {
        value.ok_or_else(|| self.error("a required field missing"))
    }

    /// Takes `bytes` if they come next.
    fn lit(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self.at + bytes.len();
        (self.b.get(self.at..end)? == bytes).then(|| self.at = end)
    }

    /// An unsigned integer of at most `max` as serde_json writes it (no
    /// leading zero), else `None`. Any 19 digits fit a `u64`, so a digit
    /// costs a multiply and an add, with no test of the range until the
    /// end; only a number of more digits is read again, checked.
    fn plain_unsigned(&mut self, max: u64) -> Option<u64> {
        let start = self.at;
        let mut at = start;
        let mut n: u64 = 0;
        while let Some(&c) = self.b.get(at) {
            let d = c.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            n = n.wrapping_mul(10).wrapping_add(u64::from(d));
            at += 1;
        }
        let digits = at - start;
        if digits > 19 {
            n = checked_decimal(self.b.get(start..at)?)?;
        }
        let leading_zero = digits > 1 && self.b.get(start) == Some(&b'0');
        if digits == 0 || leading_zero || n > max {
            return None;
        }
        self.at = at;
        Some(n)
    }

    /// One answer as the agent writes it ([`read_as_written`]).
    fn answer_as_written(&mut self) -> Option<LeaseAnswer> {
        if self.lit(b"{\"result\":\"grant\",\"tokens\":").is_some() {
            let tokens = u32::try_from(self.plain_unsigned(U32)?).ok()?;
            self.lit(b",\"ttl_ms\":")?;
            let ttl_ms = self.plain_unsigned(u64::MAX)?;
            self.lit(b",\"remaining\":")?;
            let remaining = u32::try_from(self.plain_unsigned(U32)?).ok()?;
            self.lit(b",\"reset_ms\":")?;
            let reset_ms = self.plain_unsigned(u64::MAX)?;
            let local = self.lit(b",\"local\":true").is_some();
            let from = self.answered_from_as_written();
            let next_ask_ms = match self.lit(b",\"next_ask_ms\":") {
                Some(()) => Some(self.plain_unsigned(u64::MAX)?),
                None => None,
            };
            self.lit(b"}")?;
            return Some(LeaseAnswer::Grant {
                tokens,
                ttl_ms,
                remaining,
                reset_ms,
                local,
                from,
                next_ask_ms,
            });
        }
        self.lit(b"{\"result\":\"deny\",\"retry_after_ms\":")?;
        let retry_after_ms = self.plain_unsigned(u64::MAX)?;
        let local = self.lit(b",\"local\":true").is_some();
        let from = self.answered_from_as_written();
        self.lit(b"}")?;
        Some(LeaseAnswer::Deny {
            retry_after_ms,
            local,
            from,
        })
    }

    fn answered_from_as_written(&mut self) -> Option<AnsweredFrom> {
        if self.lit(b",\"from\":\"pool\"").is_some() {
            Some(AnsweredFrom::Pool)
        } else if self.lit(b",\"from\":\"store\"").is_some() {
            Some(AnsweredFrom::Store)
        } else {
            None
        }
    }

    /// Skips whitespace; the next byte, if any.
    fn ws(&mut self) -> Option<u8> {
        while let Some(&c) = self.b.get(self.at) {
            if !matches!(c, b' ' | b'\n' | b'\t' | b'\r') {
                return Some(c);
            }
            self.at += 1;
        }
        None
    }

    /// Takes `c` after whitespace.
    fn eat(&mut self, c: u8, what: &'static str) -> Result<(), ReadError> {
        if self.ws() != Some(c) {
            return Err(self.error(what));
        }
        self.at += 1;
        Ok(())
    }

    /// Takes the literal `word` (its first byte already seen).
    fn word(&mut self, word: &[u8]) -> Result<(), ReadError> {
        match self.b.get(self.at..self.at + word.len()) {
            Some(w) if w == word => {
                self.at += word.len();
                Ok(())
            }
            _ => Err(self.error("an unknown literal")),
        }
    }

    /// An object: `field` reads each member's value after its name.
    #[inline(never)]
    fn object(
        &mut self,
        mut field: impl FnMut(&mut Self, Cow<'a, str>) -> Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        self.eat(b'{', "an object expected")?;
        if self.ws() == Some(b'}') {
            self.at += 1;
            return Ok(());
        }
        loop {
            if self.ws() != Some(b'"') {
                return Err(self.error("a field name expected"));
            }
            self.at += 1;
            let name = self.string()?;
            self.eat(b':', "`:` expected")?;
            field(self, name)?;
            match self.ws() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(self.error("`,` or `}` expected")),
            }
        }
    }

    /// The answers: an array of objects.
    #[inline(never)]
    fn answers(&mut self) -> Result<Vec<LeaseAnswer>, ReadError> {
        self.eat(b'[', "an array expected")?;
        let mut answers = Vec::new();
        if self.ws() == Some(b']') {
            self.at += 1;
            return Ok(answers);
        }
        loop {
            answers.push(self.answer()?);
            match self.ws() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(answers);
                }
                _ => return Err(self.error("`,` or `]` expected")),
            }
        }
    }

    /// A member of the response: `v`, `items`, or one skipped.
    #[inline(never)]
    fn response_field(
        &mut self,
        name: Cow<'a, str>,
        v: &mut Option<u64>,
        items: &mut Option<Vec<LeaseAnswer>>,
    ) -> Result<(), ReadError> {
        match &*name {
            "v" => set(self, v, |r| r.unsigned(u32::MAX.into())),
            "items" => set(self, items, Reader::answers),
            _ => self.skip(),
        }
    }

    /// One answer, its fields in any order.
    fn answer(&mut self) -> Result<LeaseAnswer, ReadError> {
        let mut f = Fields::default();
        self.object(|r, name| r.answer_field(name, &mut f))?;
        self.built(f)
    }

    /// A member of an answer, read into its slot of `f` (or skipped). Each
    /// kind of value is read by a function of its own: this dispatch is
    /// entered for every member.
    #[inline(never)]
    fn answer_field(&mut self, name: Cow<'a, str>, f: &mut Fields) -> Result<(), ReadError> {
        match &*name {
            "result" => self.kind_field(&mut f.result),
            "tokens" => self.unsigned_field(&mut f.tokens, U32),
            "ttl_ms" => self.unsigned_field(&mut f.ttl_ms, u64::MAX),
            "remaining" => self.unsigned_field(&mut f.remaining, U32),
            "reset_ms" => self.unsigned_field(&mut f.reset_ms, u64::MAX),
            "local" => self.bool_field(&mut f.local),
            "from" => self.answered_from_field(&mut f.from),
            "next_ask_ms" => self.nullable_unsigned_field(&mut f.next_ask_ms),
            "retry_after_ms" => self.unsigned_field(&mut f.retry_after_ms, u64::MAX),
            "reason" => self.string_field(&mut f.reason),
            _ => self.skip(),
        }
    }

    #[inline(never)]
    fn unsigned_field(&mut self, slot: &mut Option<u64>, max: u64) -> Result<(), ReadError> {
        set(self, slot, |r| r.unsigned(max))
    }

    #[inline(never)]
    fn nullable_unsigned_field(&mut self, slot: &mut Option<Option<u64>>) -> Result<(), ReadError> {
        set(self, slot, |r| r.nullable(|r| r.unsigned(u64::MAX)))
    }

    #[inline(never)]
    fn kind_field(&mut self, slot: &mut Option<Kind>) -> Result<(), ReadError> {
        set(self, slot, Reader::kind)
    }

    #[inline(never)]
    fn bool_field(&mut self, slot: &mut Option<bool>) -> Result<(), ReadError> {
        set(self, slot, Reader::boolean)
    }

    #[inline(never)]
    fn answered_from_field(
        &mut self,
        slot: &mut Option<Option<AnsweredFrom>>,
    ) -> Result<(), ReadError> {
        set(self, slot, |r| r.nullable(Reader::answered_from))
    }

    #[inline(never)]
    fn string_field(&mut self, slot: &mut Option<String>) -> Result<(), ReadError> {
        set(self, slot, |r| {
            r.eat(b'"', "a string expected")?;
            Ok(r.string()?.into_owned())
        })
    }

    /// The answer the fields name (the numbers' ranges were checked as read).
    fn built(&self, f: Fields) -> Result<LeaseAnswer, ReadError> {
        let small = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        Ok(match self.required(f.result)? {
            Kind::Grant => LeaseAnswer::Grant {
                tokens: small(self.required(f.tokens)?),
                ttl_ms: self.required(f.ttl_ms)?,
                remaining: small(self.required(f.remaining)?),
                reset_ms: self.required(f.reset_ms)?,
                local: f.local.unwrap_or_default(),
                from: f.from.flatten(),
                next_ask_ms: f.next_ask_ms.flatten(),
            },
            Kind::Deny => LeaseAnswer::Deny {
                retry_after_ms: self.required(f.retry_after_ms)?,
                local: f.local.unwrap_or_default(),
                from: f.from.flatten(),
            },
            Kind::Unavailable => LeaseAnswer::Unavailable {
                reason: self.required(f.reason)?,
            },
        })
    }

    #[inline(never)]
    fn kind(&mut self) -> Result<Kind, ReadError> {
        self.eat(b'"', "a string expected")?;
        match &*self.string()? {
            "grant" => Ok(Kind::Grant),
            "deny" => Ok(Kind::Deny),
            "unavailable" => Ok(Kind::Unavailable),
            _ => Err(self.error("an unknown `result`")),
        }
    }

    #[inline(never)]
    fn answered_from(&mut self) -> Result<AnsweredFrom, ReadError> {
        self.eat(b'"', "a string expected")?;
        match &*self.string()? {
            "pool" => Ok(AnsweredFrom::Pool),
            "store" => Ok(AnsweredFrom::Store),
            _ => Err(self.error("an unknown `from`")),
        }
    }

    #[inline(never)]
    fn boolean(&mut self) -> Result<bool, ReadError> {
        match self.ws() {
            Some(b't') => self.word(b"true").map(|()| true),
            Some(b'f') => self.word(b"false").map(|()| false),
            _ => Err(self.error("a boolean expected")),
        }
    }

    /// `null`, or the value `read` reads.
    fn nullable<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<T, ReadError>,
    ) -> Result<Option<T>, ReadError> {
        if self.ws() == Some(b'n') {
            return self.word(b"null").map(|()| None);
        }
        read(self).map(Some)
    }

    /// An unsigned integer of at most `max`: digits, no sign, fraction or
    /// exponent, no leading zero (serde_json refuses each for an integer).
    #[inline(never)]
    fn unsigned(&mut self, max: u64) -> Result<u64, ReadError> {
        self.ws();
        let start = self.at;
        let mut n: u64 = 0;
        while let Some(&c) = self.b.get(self.at) {
            if !c.is_ascii_digit() {
                break;
            }
            if self.at > start && n == 0 {
                return Err(self.error("a number with a leading zero"));
            }
            // `n * 10 + d <= max`, tested without `checked_mul`, which on
            // wasm32 multiplies in 128 bits by a call into the compiler's
            // runtime for every digit.
            let d = u64::from(c - b'0');
            match max.checked_sub(d) {
                Some(room) if n <= room / 10 => n = n * 10 + d,
                _ => return Err(self.error("a number out of range")),
            }
            self.at += 1;
        }
        if self.at == start || matches!(self.b.get(self.at), Some(b'.' | b'e' | b'E')) {
            return Err(self.error("an unsigned integer expected"));
        }
        Ok(n)
    }

    /// A string's contents, after its opening quote, up to and past its
    /// closing one: escapes decoded (a surrogate only in a pair), bytes
    /// checked to be UTF-8, control characters refused. Borrowed when it
    /// holds no escape, found by one scan for the closing quote.
    #[inline(never)]
    fn string(&mut self) -> Result<Cow<'a, str>, ReadError> {
        let start = self.at;
        let rest = self.b.get(start..).unwrap_or_default();
        let end = rest
            .iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20);
        match end.map(|n| (n, rest.get(n))) {
            Some((n, Some(b'"'))) => {
                self.at = start + n + 1;
                let raw = rest.get(..n).unwrap_or_default();
                crate::text::utf8(raw)
                    .map(Cow::Borrowed)
                    .ok_or_else(|| self.error("a string not UTF-8"))
            }
            _ => self.escaped_string().map(Cow::Owned),
        }
    }

    /// [`Reader::string`] byte by byte, for a string with escapes (or an
    /// error).
    #[inline(never)]
    fn escaped_string(&mut self) -> Result<String, ReadError> {
        let mut buf = Vec::new();
        loop {
            let Some(&c) = self.b.get(self.at) else {
                return Err(self.error("an unterminated string"));
            };
            match c {
                b'"' => break,
                b'\\' => {
                    self.at += 1;
                    self.escape(&mut buf)?;
                }
                0..=0x1f => return Err(self.error("a control character in a string")),
                _ => {
                    buf.push(c);
                    self.at += 1;
                }
            }
        }
        self.at += 1;
        String::from_utf8(buf).map_err(|_| self.error("a string not UTF-8"))
    }

    /// One escape, after its backslash, decoded into `buf`.
    #[inline(never)]
    fn escape(&mut self, buf: &mut Vec<u8>) -> Result<(), ReadError> {
        let Some(&c) = self.b.get(self.at) else {
            return Err(self.error("an unterminated string"));
        };
        self.at += 1;
        let byte = match c {
            b'"' | b'\\' | b'/' => c,
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let ch = self.unicode_escape()?;
                let mut utf8 = [0; 4];
                buf.extend_from_slice(ch.encode_utf8(&mut utf8).as_bytes());
                return Ok(());
            }
            _ => return Err(self.error("an invalid escape")),
        };
        buf.push(byte);
        Ok(())
    }

    /// The character of a `\u` escape (after the `u`), a surrogate pair
    /// read whole.
    fn unicode_escape(&mut self) -> Result<char, ReadError> {
        let first = self.hex4()?;
        if (0xDC00..=0xDFFF).contains(&first) {
            return Err(self.error("a lone surrogate"));
        }
        if !(0xD800..=0xDBFF).contains(&first) {
            return char::from_u32(first).ok_or_else(|| self.error("an invalid escape"));
        }
        if self.b.get(self.at..self.at + 2) != Some(b"\\u") {
            return Err(self.error("a lone surrogate"));
        }
        self.at += 2;
        let second = self.hex4()?;
        if !(0xDC00..=0xDFFF).contains(&second) {
            return Err(self.error("a lone surrogate"));
        }
        let c = 0x1_0000 + ((first - 0xD800) << 10) + (second - 0xDC00);
        char::from_u32(c).ok_or_else(|| self.error("an invalid escape"))
    }

    /// Four hex digits.
    fn hex4(&mut self) -> Result<u32, ReadError> {
        let digits = self
            .b
            .get(self.at..self.at + 4)
            .ok_or_else(|| self.error("an unterminated escape"))?;
        let mut n = 0;
        for &d in digits {
            let v = char::from(d)
                .to_digit(16)
                .ok_or_else(|| self.error("an invalid escape"))?;
            n = n * 16 + v;
        }
        self.at += 4;
        Ok(n)
    }

    /// Skips one value of any kind, checked as serde_json checks a value it
    /// ignores (a string's escapes by their form only, its bytes unchecked).
    /// Nesting is tracked in a list of the open brackets, no deeper than the
    /// body is long.
    #[inline(never)]
    fn skip(&mut self) -> Result<(), ReadError> {
        let mut open: Vec<u8> = Vec::new();
        loop {
            // A value.
            match self.ws() {
                Some(b'n') => self.word(b"null")?,
                Some(b't') => self.word(b"true")?,
                Some(b'f') => self.word(b"false")?,
                Some(b'"') => {
                    self.at += 1;
                    self.skip_string()?;
                }
                Some(b'-' | b'0'..=b'9') => self.skip_number()?,
                Some(c @ (b'[' | b'{')) => {
                    self.at += 1;
                    let close = if c == b'[' { b']' } else { b'}' };
                    if self.ws() == Some(close) {
                        self.at += 1;
                    } else {
                        open.push(close);
                        if close == b'}' {
                            self.skip_name()?;
                        }
                        continue;
                    }
                }
                _ => return Err(self.error("a value expected")),
            }
            // After a value: the next member, or the ends of the containers.
            loop {
                let Some(&close) = open.last() else {
                    return Ok(());
                };
                match self.ws() {
                    Some(b',') => {
                        self.at += 1;
                        if close == b'}' {
                            self.skip_name()?;
                        }
                        break;
                    }
                    Some(c) if c == close => {
                        self.at += 1;
                        open.pop();
                    }
                    _ => return Err(self.error("`,` or a closing bracket expected")),
                }
            }
        }
    }

    /// A member's name and its colon, in a skipped object (the name
    /// checked as a skipped string is).
    fn skip_name(&mut self) -> Result<(), ReadError> {
        if self.ws() != Some(b'"') {
            return Err(self.error("a field name expected"));
        }
        self.at += 1;
        self.skip_string()?;
        self.eat(b':', "`:` expected")
    }

    /// A skipped string, after its opening quote.
    fn skip_string(&mut self) -> Result<(), ReadError> {
        loop {
            let rest = self.b.get(self.at..).unwrap_or_default();
            let Some(n) = rest
                .iter()
                .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
            else {
                return Err(self.error("an unterminated string"));
            };
            self.at += n + 1;
            match rest.get(n) {
                Some(b'"') => return Ok(()),
                Some(b'\\') => self.skip_escape()?,
                _ => return Err(self.error("a control character in a string")),
            }
        }
    }

    /// An escape's form, after its backslash, in a skipped string.
    fn skip_escape(&mut self) -> Result<(), ReadError> {
        match self.b.get(self.at) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                self.at += 1;
                Ok(())
            }
            Some(b'u') => {
                self.at += 1;
                self.hex4().map(|_| ())
            }
            _ => Err(self.error("an invalid escape")),
        }
    }

    /// A skipped number: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn skip_number(&mut self) -> Result<(), ReadError> {
        if self.b.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match self.b.get(self.at) {
            Some(b'0') => {
                self.at += 1;
                if self.b.get(self.at).is_some_and(u8::is_ascii_digit) {
                    return Err(self.error("a number with a leading zero"));
                }
            }
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.error("a number expected")),
        }
        if self.b.get(self.at) == Some(&b'.') {
            self.at += 1;
            self.some_digits()?;
        }
        if matches!(self.b.get(self.at), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.b.get(self.at), Some(b'+' | b'-')) {
                self.at += 1;
            }
            self.some_digits()?;
        }
        Ok(())
    }

    fn digits(&mut self) {
        while self.b.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
    }

    fn some_digits(&mut self) -> Result<(), ReadError> {
        if !self.b.get(self.at).is_some_and(u8::is_ascii_digit) {
            return Err(self.error("a digit expected"));
        }
        self.digits();
        Ok(())
    }
}

#[cfg(test)]
mod tests;
