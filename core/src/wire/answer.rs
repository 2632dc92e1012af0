//! Reading a [`LeaseAnswer`] without buffering it.
//!
//! serde's derived form of an internally tagged enum (`"result": "grant"`
//! among the fields) cannot know the variant before it has read the tag, so
//! it first copies the whole object into an owned tree of its own (a string
//! per field name, a node per value) and reads the variant from that. The
//! filter reads one answer per lease call in Wasm, where those allocations
//! would be a large part of what a new key's request costs (`make wasm-cost`
//! counts it: bench/results/wasm-cost.md). Here every field the three
//! variants know is read straight into its slot, in any order, and the
//! variant is built once the object has ended. What is accepted is what the
//! derived form accepts (unknown fields are skipped; a field sent twice or
//! missing from the variant named is an error, and so is an unknown
//! `result`), except an array (the tag, then the fields in order), which no
//! agent writes.

use std::fmt;

use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::{AnsweredFrom, LeaseAnswer};

/// A field of any of the three variants.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum Field {
    Result,
    Tokens,
    TtlMs,
    Remaining,
    ResetMs,
    Local,
    From,
    NextAskMs,
    RetryAfterMs,
    Reason,
    #[serde(other)]
    Other,
}

/// The variant the `result` field names.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Grant,
    Deny,
    Unavailable,
}

/// Every field's value, as read so far.
#[derive(Default)]
struct Fields {
    result: Option<Kind>,
    tokens: Option<u32>,
    ttl_ms: Option<u64>,
    remaining: Option<u32>,
    reset_ms: Option<u64>,
    local: Option<bool>,
    from: Option<Option<AnsweredFrom>>,
    next_ask_ms: Option<Option<u64>>,
    retry_after_ms: Option<u64>,
    reason: Option<String>,
}

/// Reads the next value into `slot`, refusing a second one for `name`.
fn read<'de, A, T>(map: &mut A, slot: &mut Option<T>, name: &'static str) -> Result<(), A::Error>
where
    A: MapAccess<'de>,
    T: Deserialize<'de>,
{
    if slot.is_some() {
        return Err(de::Error::duplicate_field(name));
    }
    *slot = Some(map.next_value()?);
    Ok(())
}

/// The value of a required field.
fn required<T, E: de::Error>(value: Option<T>, name: &'static str) -> Result<T, E> {
    value.ok_or_else(|| de::Error::missing_field(name))
}

struct AnswerVisitor;

impl<'de> Visitor<'de> for AnswerVisitor {
    type Value = LeaseAnswer;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a lease answer (an object with `result`)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LeaseAnswer, A::Error> {
        let mut f = Fields::default();
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Result => read(&mut map, &mut f.result, "result")?,
                Field::Tokens => read(&mut map, &mut f.tokens, "tokens")?,
                Field::TtlMs => read(&mut map, &mut f.ttl_ms, "ttl_ms")?,
                Field::Remaining => read(&mut map, &mut f.remaining, "remaining")?,
                Field::ResetMs => read(&mut map, &mut f.reset_ms, "reset_ms")?,
                Field::Local => read(&mut map, &mut f.local, "local")?,
                Field::From => read(&mut map, &mut f.from, "from")?,
                Field::NextAskMs => read(&mut map, &mut f.next_ask_ms, "next_ask_ms")?,
                Field::RetryAfterMs => read(&mut map, &mut f.retry_after_ms, "retry_after_ms")?,
                Field::Reason => read(&mut map, &mut f.reason, "reason")?,
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(match required(f.result, "result")? {
            Kind::Grant => LeaseAnswer::Grant {
                tokens: required(f.tokens, "tokens")?,
                ttl_ms: required(f.ttl_ms, "ttl_ms")?,
                remaining: required(f.remaining, "remaining")?,
                reset_ms: required(f.reset_ms, "reset_ms")?,
                local: f.local.unwrap_or_default(),
                from: f.from.flatten(),
                next_ask_ms: f.next_ask_ms.flatten(),
            },
            Kind::Deny => LeaseAnswer::Deny {
                retry_after_ms: required(f.retry_after_ms, "retry_after_ms")?,
                local: f.local.unwrap_or_default(),
                from: f.from.flatten(),
            },
            Kind::Unavailable => LeaseAnswer::Unavailable {
                reason: required(f.reason, "reason")?,
            },
        })
    }
}

impl<'de> Deserialize<'de> for LeaseAnswer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(AnswerVisitor)
    }
}

#[cfg(test)]
mod tests;
