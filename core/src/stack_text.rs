//! Short text on the stack: the request path forms slot keys, RateLimit field
//! values and the quota a response reports once a request, and a heap
//! allocation costs the filter's Wasm more than the rest of their work.

/// At most `N` bytes of text, copied in whole `&str`s. One that would not fit
/// is marked, never cut: [`StackText::as_str`] is then `None`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StackText<const N: usize> {
    bytes: [u8; N],
    len: usize,
    overflowed: bool,
}

impl<const N: usize> Default for StackText<N> {
    fn default() -> Self {
        StackText {
            bytes: [0; N],
            len: 0,
            overflowed: false,
        }
    }
}

impl<const N: usize> StackText<N> {
    /// `s` as a text of its own, `None` when it is longer than `N`.
    pub fn of(s: &str) -> Option<Self> {
        let mut text = Self::default();
        text.push_str(s);
        (!text.overflowed).then_some(text)
    }

    /// Appends `s`, or marks the text overflowed if it does not fit.
    pub fn push_str(&mut self, s: &str) {
        let end = self.len.saturating_add(s.len());
        match self.bytes.get_mut(self.len..end) {
            Some(to) if !self.overflowed => {
                to.copy_from_slice(s.as_bytes());
                self.len = end;
            }
            _ => self.overflowed = true,
        }
    }

    /// The text, or `None` if some of it did not fit.
    pub fn as_str(&self) -> Option<&str> {
        if self.overflowed {
            return None;
        }
        // Whole `&str`s were copied in, so the bytes are UTF-8.
        crate::text::utf8(self.bytes.get(..self.len)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_that_fits_reads_back_and_text_that_does_not_is_marked_not_cut() {
        let mut t = StackText::<8>::default();
        t.push_str("abc");
        t.push_str("défg");
        assert_eq!(t.as_str(), Some("abcdéfg"));
        t.push_str("h");
        assert_eq!(t.as_str(), None);
        // Once overflowed, it stays so: a later short push is not appended.
        t.push_str("");
        assert_eq!(t.as_str(), None);
        assert_eq!(
            StackText::<3>::of("abc").and_then(|t| t.as_str().map(String::from)),
            Some("abc".into())
        );
        assert_eq!(StackText::<3>::of("abcd"), None);
    }
}
