//! Digits written without the formatting machinery: an unsigned integer's
//! decimal digits on the stack (for the strings the filter forms on every
//! request: a slot's shared-data key, the RateLimit fields), and the hex
//! digits of key ids, `\u` escapes and percent-escapes.

/// Lowercase hex digits, by value.
pub(crate) const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(HEX_LOWER[usize::from(b >> 4)]));
        out.push(char::from(HEX_LOWER[usize::from(b & 0xf)]));
    }
    out
}

/// `byte` percent-escaped (`%2F`: uppercase, as RFC 3986 recommends).
pub(crate) fn push_percent(out: &mut String, byte: u8) {
    const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(char::from(HEX_UPPER[usize::from(byte >> 4)]));
    out.push(char::from(HEX_UPPER[usize::from(byte & 0xf)]));
}

/// The decimal digits of a `u64` (at most 20).
#[derive(Debug, Clone, Copy)]
pub struct Decimal {
    digits: [u8; 20],
    start: usize,
}

impl Decimal {
    pub fn of(mut v: u64) -> Decimal {
        let mut digits = [b'0'; 20];
        let mut start = digits.len();
        while let Some(at) = start.checked_sub(1) {
            start = at;
            if let Some(d) = digits.get_mut(at) {
                *d = b'0' + (v % 10) as u8;
            }
            v /= 10;
            if v == 0 {
                break;
            }
        }
        Decimal { digits, start }
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII digits were written.
        self.digits
            .get(self.start..)
            .and_then(crate::text::utf8)
            .unwrap_or("0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn digits_are_the_formatters(v in any::<u64>()) {
            let d = Decimal::of(v);
            prop_assert_eq!(d.as_str(), v.to_string());
        }
    }

    #[test]
    fn the_ends_of_the_range() {
        assert_eq!(Decimal::of(0).as_str(), "0");
        assert_eq!(Decimal::of(u64::MAX).as_str(), "18446744073709551615");
    }
}
