use proptest::prelude::*;

use super::*;

/// The map as Envoy serializes it for `proxy_get_header_map_pairs`, written
/// out byte by byte (the SDK's own test map has the same layout).
fn envoy_bytes() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&2u32.to_le_bytes());
    b.extend_from_slice(&5u32.to_le_bytes());
    b.extend_from_slice(&8u32.to_le_bytes());
    b.extend_from_slice(&9u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(b":path\0/bytes/1\0x-api-key\0k\0");
    b
}

#[test]
fn reads_the_proxys_layout_in_place() {
    let list = HeaderList::from_serialized(envoy_bytes()).unwrap();
    let pairs: Vec<_> = list.iter().collect();
    assert_eq!(
        pairs,
        vec![(":path", &b"/bytes/1"[..]), ("x-api-key", &b"k"[..])]
    );
    assert_eq!(list.len(), 2);
    assert_eq!(list.get("x-api-key"), Some(&b"k"[..]));
    assert_eq!(list.get("X-Api-Key"), None, "get is exact; matching folds");
    assert_eq!(
        list,
        HeaderList::from_pairs([(":path", "/bytes/1"), ("x-api-key", "k")])
    );
}

#[test]
fn no_headers_is_an_empty_buffer_or_a_zero_count() {
    for buf in [Vec::new(), 0u32.to_le_bytes().to_vec()] {
        let list = HeaderList::from_serialized(buf).unwrap();
        assert!(list.is_empty());
        assert_eq!(list.iter().count(), 0);
    }
}

#[test]
fn a_layout_that_does_not_hold_together_is_refused() {
    let good = envoy_bytes();
    // Cut anywhere: a length or a field runs past the end.
    for cut in 1..good.len() {
        assert_eq!(
            HeaderList::from_serialized(good[..cut].to_vec()),
            Err(MalformedHeaders),
            "cut at {cut}"
        );
    }
    // The NUL after the first name (`:path`, at 20) replaced.
    let mut no_nul = good.clone();
    no_nul[25] = b'x';
    assert_eq!(HeaderList::from_serialized(no_nul), Err(MalformedHeaders));
    // A name that is not UTF-8.
    let mut bad_name = good.clone();
    bad_name[4 + 16] = 0xff;
    assert_eq!(HeaderList::from_serialized(bad_name), Err(MalformedHeaders));
    // A count whose lengths alone overflow the buffer (and `usize` on wasm32).
    let mut huge = good;
    huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(HeaderList::from_serialized(huge), Err(MalformedHeaders));
}

fn pairs() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    prop::collection::vec(
        (
            "[:a-zA-Z0-9_-]{0,12}",
            prop::collection::vec(any::<u8>(), 0..24),
        ),
        0..10,
    )
}

proptest! {
    /// Made from pairs, read back: the same pairs in the same order, values
    /// holding any byte (a NUL too: lengths delimit, not the NULs).
    #[test]
    fn pairs_come_back_as_they_went_in(pairs in pairs()) {
        let list = HeaderList::from_pairs(pairs.iter().map(|(n, v)| (n, v)));
        let back: Vec<(String, Vec<u8>)> =
            list.iter().map(|(n, v)| (n.to_string(), v.to_vec())).collect();
        prop_assert_eq!(&back, &pairs);
        prop_assert_eq!(list.len(), pairs.len());
        prop_assert_eq!(list.raw().size_hint(), (pairs.len(), Some(pairs.len())));
        // What the proxy would hand over is accepted as the same list.
        prop_assert_eq!(HeaderList::from_serialized(list.buf.clone()), Ok(list));
    }

    /// Any bytes, or a good map with one byte changed: refused or read, never
    /// a panic, and what is accepted reads as exactly its count of pairs.
    #[test]
    fn any_bytes_are_refused_or_read_whole(
        buf in prop::collection::vec(any::<u8>(), 0..64),
        pairs in pairs(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut changed = HeaderList::from_pairs(pairs).buf;
        if !changed.is_empty() {
            let i = at.index(changed.len());
            changed[i] = byte;
        }
        for buf in [buf, changed] {
            if let Ok(list) = HeaderList::from_serialized(buf) {
                prop_assert_eq!(list.raw().count(), list.len());
                prop_assert!(list.raw().all(|(n, _)| std::str::from_utf8(n).is_ok()));
            }
        }
    }
}
