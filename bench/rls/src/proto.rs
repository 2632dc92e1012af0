//! The few protobuf fields of `envoy.service.ratelimit.v3` this service reads
//! and writes, and gRPC's length-prefixed framing, by hand.
//!
//! RateLimitRequest: `domain` = 1 (string), `descriptors` = 2 (repeated
//! RateLimitDescriptor: `entries` = 1, repeated Entry: `key` = 1, `value` = 2),
//! `hits_addend` = 3 (uint32). RateLimitResponse: `overall_code` = 1 (enum:
//! OK = 1, OVER_LIMIT = 2). Every other field is skipped.

/// The largest gRPC message accepted, in bytes: Envoy's requests carry a
/// domain and a few short descriptors.
pub const MAX_MESSAGE: usize = 64 * 1024;
/// The most descriptors one request may carry: each costs two Redis commands.
pub const MAX_DESCRIPTORS: usize = 16;
/// The most entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 16;

/// Why a request body is not a RateLimitRequest this service takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the gRPC frame is shorter than its 5-byte prefix")]
    ShortFrame,
    #[error("the gRPC message is compressed; this service takes none")]
    Compressed,
    #[error("the gRPC prefix says {said} bytes, the body holds {held}")]
    FrameLength { said: usize, held: usize },
    #[error("the gRPC message is larger than {MAX_MESSAGE} bytes")]
    TooLarge,
    #[error("the protobuf message ends inside a field")]
    Truncated,
    #[error("a protobuf varint is longer than 10 bytes")]
    Varint,
    #[error("protobuf wire type {0} is not one this message uses")]
    WireType(u64),
    #[error("field {0} has the wrong wire type")]
    FieldType(u64),
    #[error("the domain is not UTF-8")]
    Domain,
    #[error("more than {MAX_DESCRIPTORS} descriptors")]
    Descriptors,
    #[error("a descriptor has more than {MAX_ENTRIES} entries")]
    Entries,
    #[error("hits_addend is above 2^32 - 1")]
    Hits,
}

/// One descriptor's entries, as (key, value) bytes.
pub type Descriptor = Vec<(Vec<u8>, Vec<u8>)>;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimitRequest {
    pub domain: String,
    pub descriptors: Vec<Descriptor>,
    /// Hits to add; 0 (the field absent) means 1, as in envoyproxy/ratelimit.
    pub hits_addend: u32,
}

/// RateLimitResponse.Code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok = 1,
    OverLimit = 2,
}

/// The one message of a gRPC request body: a 5-byte prefix (compressed flag,
/// u32 big-endian length), then exactly that many bytes.
pub fn unframe(body: &[u8]) -> Result<&[u8], DecodeError> {
    let (prefix, message) = body.split_at_checked(5).ok_or(DecodeError::ShortFrame)?;
    if prefix[0] != 0 {
        return Err(DecodeError::Compressed);
    }
    let said = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if said > MAX_MESSAGE {
        return Err(DecodeError::TooLarge);
    }
    if said != message.len() {
        return Err(DecodeError::FrameLength {
            said,
            held: message.len(),
        });
    }
    Ok(message)
}

/// `message` behind its gRPC prefix (uncompressed).
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// RateLimitResponse with `overall_code` alone.
pub fn encode_response(code: Code) -> Vec<u8> {
    vec![0x08, code as u8]
}

/// A protobuf field's value, as far as this service needs it.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// Reads a message's fields in order.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for i in 0..10 {
            let (&byte, rest) = self.buf.split_first().ok_or(DecodeError::Truncated)?;
            self.buf = rest;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::Varint)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let (head, rest) = self.buf.split_at_checked(n).ok_or(DecodeError::Truncated)?;
        self.buf = rest;
        Ok(head)
    }

    /// The next (field number, value), or `None` at the end.
    fn field(&mut self) -> Result<Option<(u64, Value<'a>)>, DecodeError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let tag = self.varint()?;
        let value = match tag & 7 {
            0 => Value::Varint(self.varint()?),
            1 => self.take(8).map(|_| Value::Fixed)?,
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| DecodeError::Truncated)?;
                Value::Bytes(self.take(len)?)
            }
            5 => self.take(4).map(|_| Value::Fixed)?,
            other => return Err(DecodeError::WireType(other)),
        };
        Ok(Some((tag >> 3, value)))
    }
}

fn bytes(field: u64, value: Value<'_>) -> Result<&[u8], DecodeError> {
    match value {
        Value::Bytes(b) => Ok(b),
        _ => Err(DecodeError::FieldType(field)),
    }
}

/// A RateLimitRequest (the message, unframed).
pub fn decode_request(message: &[u8]) -> Result<RateLimitRequest, DecodeError> {
    let mut out = RateLimitRequest::default();
    let mut reader = Reader { buf: message };
    while let Some((field, value)) = reader.field()? {
        match (field, value) {
            (1, v) => {
                let raw = bytes(1, v)?;
                out.domain = std::str::from_utf8(raw)
                    .map_err(|_| DecodeError::Domain)?
                    .to_string();
            }
            (2, v) => {
                if out.descriptors.len() == MAX_DESCRIPTORS {
                    return Err(DecodeError::Descriptors);
                }
                out.descriptors.push(decode_descriptor(bytes(2, v)?)?);
            }
            (3, Value::Varint(n)) => {
                out.hits_addend = u32::try_from(n).map_err(|_| DecodeError::Hits)?;
            }
            (3, _) => return Err(DecodeError::FieldType(3)),
            _ => {}
        }
    }
    Ok(out)
}

fn decode_descriptor(message: &[u8]) -> Result<Descriptor, DecodeError> {
    let mut entries = Vec::new();
    let mut reader = Reader { buf: message };
    while let Some((field, value)) = reader.field()? {
        if field != 1 {
            continue;
        }
        if entries.len() == MAX_ENTRIES {
            return Err(DecodeError::Entries);
        }
        let mut entry = Reader {
            buf: bytes(1, value)?,
        };
        let (mut key, mut val) = (Vec::new(), Vec::new());
        while let Some((f, v)) = entry.field()? {
            match f {
                1 => key = bytes(1, v)?.to_vec(),
                2 => val = bytes(2, v)?.to_vec(),
                _ => {}
            }
        }
        entries.push((key, val));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn varint(mut n: u64, out: &mut Vec<u8>) {
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }

    fn field_bytes(field: u64, value: &[u8], out: &mut Vec<u8>) {
        varint(field << 3 | 2, out);
        varint(value.len() as u64, out);
        out.extend_from_slice(value);
    }

    /// What Envoy's ratelimit filter sends: one descriptor of one entry.
    fn request(domain: &str, entries: &[(&str, &str)], hits: Option<u64>) -> Vec<u8> {
        let mut descriptor = Vec::new();
        for (k, v) in entries {
            let mut entry = Vec::new();
            field_bytes(1, k.as_bytes(), &mut entry);
            field_bytes(2, v.as_bytes(), &mut entry);
            field_bytes(1, &entry, &mut descriptor);
        }
        let mut out = Vec::new();
        field_bytes(1, domain.as_bytes(), &mut out);
        field_bytes(2, &descriptor, &mut out);
        if let Some(h) = hits {
            varint(3 << 3, &mut out);
            varint(h, &mut out);
        }
        out
    }

    #[test]
    fn decodes_what_envoy_sends() {
        let msg = request("bench", &[("key", "k-1"), ("path", "/")], Some(3));
        let req = decode_request(unframe(&frame(&msg)).unwrap()).unwrap();
        assert_eq!(req.domain, "bench");
        assert_eq!(req.hits_addend, 3);
        assert_eq!(
            req.descriptors,
            vec![vec![
                (b"key".to_vec(), b"k-1".to_vec()),
                (b"path".to_vec(), b"/".to_vec())
            ]]
        );
    }

    #[test]
    fn skips_unknown_fields_of_every_wire_type() {
        let mut msg = request("d", &[("key", "v")], None);
        // Field 4 varint, 5 fixed64, 6 bytes, 7 fixed32.
        msg.extend_from_slice(&[4 << 3, 0x96, 0x01]);
        msg.extend_from_slice(&[5 << 3 | 1, 0, 0, 0, 0, 0, 0, 0, 0]);
        msg.extend_from_slice(&[6 << 3 | 2, 2, b'x', b'y']);
        msg.extend_from_slice(&[7 << 3 | 5, 0, 0, 0, 0]);
        let req = decode_request(&msg).unwrap();
        assert_eq!((req.domain.as_str(), req.hits_addend), ("d", 0));
        assert_eq!(req.descriptors.len(), 1);
    }

    #[test]
    fn encodes_the_overall_code_behind_a_grpc_prefix() {
        assert_eq!(frame(&encode_response(Code::Ok)), [0, 0, 0, 0, 2, 0x08, 1]);
        assert_eq!(encode_response(Code::OverLimit), [0x08, 2]);
    }

    #[test]
    fn bad_frames_are_errors() {
        assert_eq!(unframe(&[0, 0, 0]), Err(DecodeError::ShortFrame));
        assert_eq!(unframe(&[1, 0, 0, 0, 0]), Err(DecodeError::Compressed));
        assert_eq!(
            unframe(&[0, 0, 0, 0, 3, 1]),
            Err(DecodeError::FrameLength { said: 3, held: 1 })
        );
        assert_eq!(unframe(&[0, 0xff, 0, 0, 0]), Err(DecodeError::TooLarge));
        assert_eq!(unframe(&[0, 0, 0, 0, 0]), Ok(&[][..]));
    }

    #[test]
    fn bad_messages_are_errors_never_panics() {
        let cases: [(&[u8], DecodeError); 6] = [
            (&[0x0a, 5, b'a'], DecodeError::Truncated),
            (&[0x0a], DecodeError::Truncated),
            (
                &[
                    0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
                ],
                DecodeError::Varint,
            ),
            (&[0x0b], DecodeError::WireType(3)),
            (&[0x08, 1], DecodeError::FieldType(1)),
            (&[0x18, 0x80, 0x80, 0x80, 0x80, 0x10], DecodeError::Hits),
        ];
        for (msg, want) in cases {
            assert_eq!(decode_request(msg), Err(want), "{msg:?}");
        }
        assert_eq!(decode_request(&[0x0a, 1, 0xff]), Err(DecodeError::Domain));
        // Every prefix of a valid message: an error or a value, never a panic.
        let msg = request("bench", &[("key", "value")], Some(7));
        for n in 0..msg.len() {
            let _ = decode_request(&msg[..n]);
        }
    }

    #[test]
    fn descriptors_and_entries_are_bounded() {
        let one = request("d", &[("k", "v")], None);
        let descriptor = &one[3..];
        let mut many = Vec::new();
        for _ in 0..=MAX_DESCRIPTORS {
            many.extend_from_slice(descriptor);
        }
        assert_eq!(decode_request(&many), Err(DecodeError::Descriptors));
        let entries: Vec<(&str, &str)> = vec![("k", "v"); MAX_ENTRIES + 1];
        let wide = request("d", &entries, None);
        assert_eq!(decode_request(&wide), Err(DecodeError::Entries));
    }
}
