//! A request's headers as one buffer, in the form proxy-wasm hands them over:
//! a little-endian `u32` count, then each pair's name and value lengths (two
//! `u32`s a pair), then each name and value, every one followed by a NUL byte.
//!
//! The filter reads a request's headers with one host call. Copied into a
//! list of owned pairs (what the proxy-wasm SDK returns), each header costs
//! two allocations, and their frees, on every request; kept as the host's one
//! buffer and read in place, the whole list costs the host's one. Its layout
//! is checked once, when the list is made ([`HeaderList::from_serialized`]),
//! so reading it never fails. Other callers (the agent's `explain`, tests)
//! build the same form from pairs ([`HeaderList::from_pairs`]).

use std::fmt;

/// Headers in proxy-wasm's serialized form, checked: every length in bounds,
/// every name UTF-8.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct HeaderList {
    /// Empty, or the whole serialized map.
    buf: Vec<u8>,
}

/// A serialized header map whose layout does not hold together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the proxy's header map is malformed")]
pub struct MalformedHeaders;

/// Reads the little-endian `u32` at `at`, if the buffer holds it.
fn u32_at(buf: &[u8], at: usize) -> Option<usize> {
    let bytes = buf.get(at..at.checked_add(4)?)?;
    let mut word = [0u8; 4];
    word.copy_from_slice(bytes);
    usize::try_from(u32::from_le_bytes(word)).ok()
}

/// The name or value whose length is at `len_at` and whose bytes start at
/// `data`, when it and its NUL fit the buffer; `data` moves past the NUL.
fn field<'b>(buf: &'b [u8], len_at: usize, data: &mut usize) -> Result<&'b [u8], MalformedHeaders> {
    let len = u32_at(buf, len_at).ok_or(MalformedHeaders)?;
    let end = data.checked_add(len).ok_or(MalformedHeaders)?;
    let bytes = buf.get(*data..end).ok_or(MalformedHeaders)?;
    if buf.get(end) != Some(&0) {
        return Err(MalformedHeaders);
    }
    *data = end + 1;
    Ok(bytes)
}

impl HeaderList {
    /// Takes a serialized map as the host returned it (empty: no headers),
    /// after checking its layout: the count and lengths fit the buffer, each
    /// name and value is followed by its NUL, and each name is UTF-8.
    pub fn from_serialized(buf: Vec<u8>) -> Result<Self, MalformedHeaders> {
        if buf.is_empty() {
            return Ok(Self { buf });
        }
        let count = u32_at(&buf, 0).ok_or(MalformedHeaders)?;
        let mut data = count
            .checked_mul(8)
            .and_then(|n| n.checked_add(4))
            .filter(|&n| n <= buf.len())
            .ok_or(MalformedHeaders)?;
        for i in 0..count {
            // `count * 8 + 4` fits the buffer, so these offsets do too.
            let name = field(&buf, 4 + i * 8, &mut data)?;
            if !name.is_ascii() && std::str::from_utf8(name).is_err() {
                return Err(MalformedHeaders);
            }
            field(&buf, 8 + i * 8, &mut data)?;
        }
        Ok(Self { buf })
    }

    /// The list of these pairs, in this order.
    pub fn from_pairs<N, V>(pairs: impl IntoIterator<Item = (N, V)>) -> Self
    where
        N: AsRef<str>,
        V: AsRef<[u8]>,
    {
        let mut list = Self::default();
        for (name, value) in pairs {
            list.push(name.as_ref(), value.as_ref());
        }
        list
    }

    /// An empty list with room for `bytes` of serialized fields (each is 10
    /// bytes more than its name and value), so the pushes that fill it
    /// allocate once.
    pub fn with_capacity(bytes: usize) -> Self {
        Self {
            buf: Vec::with_capacity(4 + bytes),
        }
    }

    /// Adds a header at the end. Its two lengths go in before the names and
    /// values already there, which move up by 8 bytes (a list is a few
    /// headers long).
    pub fn push(&mut self, name: &str, value: impl AsRef<[u8]>) {
        let value = value.as_ref();
        if self.buf.is_empty() {
            self.buf.extend_from_slice(&0u32.to_le_bytes());
        }
        let count = self.len();
        let lens_end = 4 + count * 8;
        let data_end = self.buf.len();
        self.buf.extend_from_slice(&[0; 8]);
        if lens_end <= data_end {
            self.buf.copy_within(lens_end..data_end, lens_end + 8);
        }
        let lens = [name.len(), value.len()].map(|n| (n as u32).to_le_bytes());
        if let Some(slot) = self.buf.get_mut(lens_end..lens_end + 8) {
            slot[..4].copy_from_slice(&lens[0]);
            slot[4..].copy_from_slice(&lens[1]);
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.buf.extend_from_slice(value);
        self.buf.push(0);
        if let Some(c) = self.buf.get_mut(..4) {
            c.copy_from_slice(&((count + 1) as u32).to_le_bytes());
        }
    }

    /// The list as the proxy reads one (`proxy_send_local_response`'s
    /// headers): a zero count when empty.
    pub fn serialized(&self) -> &[u8] {
        if self.buf.is_empty() {
            &[0; 4]
        } else {
            &self.buf
        }
    }

    /// The headers, in the order the proxy gave them.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        // Names were checked to be UTF-8 when the list was made.
        self.raw()
            .map(|(n, v)| (crate::text::utf8(n).unwrap_or_default(), v))
    }

    /// The headers with their names as bytes: what matching compares, without
    /// checking each name's UTF-8 again on every lookup.
    pub fn raw(&self) -> Iter<'_> {
        let count = self.len();
        Iter {
            buf: &self.buf,
            next: 0,
            count,
            data: count.saturating_mul(8).saturating_add(4),
        }
    }

    /// The headers as owned strings (values read lossily as UTF-8), as a
    /// response shows them.
    pub fn to_strings(&self) -> Vec<(String, String)> {
        self.iter()
            .map(|(n, v)| (n.to_string(), String::from_utf8_lossy(v).into_owned()))
            .collect()
    }

    /// The first value of the header spelled exactly `name`.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.raw()
            .find(|(n, _)| *n == name.as_bytes())
            .map(|(_, v)| v)
    }

    /// How many headers there are.
    pub fn len(&self) -> usize {
        u32_at(&self.buf, 0).unwrap_or(0)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The headers of a [`HeaderList`], read in place, names as bytes.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    buf: &'a [u8],
    next: usize,
    count: usize,
    /// Where the next pair's name starts.
    data: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.count {
            return None;
        }
        // The layout was checked when the list was made: these reads hold.
        let name_len = u32_at(self.buf, 4 + self.next * 8)?;
        let value_len = u32_at(self.buf, 8 + self.next * 8)?;
        let name = self.buf.get(self.data..self.data.checked_add(name_len)?)?;
        let value_at = self.data + name_len + 1;
        let value = self.buf.get(value_at..value_at.checked_add(value_len)?)?;
        self.data = value_at + value_len + 1;
        self.next += 1;
        Some((name, value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.count - self.next.min(self.count);
        (left, Some(left))
    }
}

impl fmt::Debug for HeaderList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|(n, v)| (n, String::from_utf8_lossy(v))))
            .finish()
    }
}

#[cfg(test)]
mod tests;
