//! Bytes read as text. `str::from_utf8` costs the filter's Wasm hundreds of
//! instructions a call, however short the text, and the request path reads a
//! dozen short texts a request (header names, the method, a key part, digits),
//! nearly always ASCII: an ASCII check passes those.

/// `bytes` as text when they are UTF-8: ASCII by the standard library's
/// word-at-a-time check (`<[u8]>::is_ascii`), anything else by its full
/// validation.
pub fn utf8(bytes: &[u8]) -> Option<&str> {
    if bytes.is_ascii() {
        // SAFETY: every byte is ASCII, and ASCII is valid UTF-8.
        #[allow(unsafe_code)]
        return Some(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes).ok()
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
