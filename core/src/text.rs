//! Bytes read as text. `str::from_utf8` costs the filter's Wasm hundreds of
//! instructions a call, however short the text, and the request path reads a
//! dozen short texts a request (header names, the method, a key part, digits),
//! nearly always ASCII: a byte loop checks those.

/// `bytes` as text when they are UTF-8: ASCII by a byte loop, anything else
/// by the standard library's validation.
pub fn utf8(bytes: &[u8]) -> Option<&str> {
    if is_ascii(bytes) {
        // SAFETY: every byte is ASCII, and ASCII is valid UTF-8.
        #[allow(unsafe_code)]
        return Some(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes).ok()
}

/// Whether every byte is ASCII: eight at a time, as one word each.
fn is_ascii(bytes: &[u8]) -> bool {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut words = bytes.chunks_exact(8);
    let mut high = 0;
    for word in &mut words {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        high |= u64::from_le_bytes(eight);
    }
    for &b in words.remainder() {
        high |= u64::from(b);
    }
    high & HIGH == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_same_answer_as_the_standard_library(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            prop_assert_eq!(utf8(&bytes), std::str::from_utf8(&bytes).ok());
        }
    }

    #[test]
    fn ascii_text_and_other_utf8_and_bytes_that_are_not() {
        assert_eq!(utf8(b"GET"), Some("GET"));
        assert_eq!(utf8("größe".as_bytes()), Some("größe"));
        assert_eq!(utf8(b"\xc3"), None);
        assert_eq!(utf8(b""), Some(""));
    }
}
