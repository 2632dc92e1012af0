//! Which node owns a key: Redis Cluster's 16,384 hash slots (CRC16 of the key's
//! hash tag) mapped to nodes by `CLUSTER SLOTS`. A single Redis is a topology of
//! one node owning every hash slot.

pub(crate) const HASH_SLOTS: u16 = 16_384;

/// The hash slot of a Redis key (CRC16/XMODEM of its hash tag, or of the whole key).
pub(crate) fn hash_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = key
        .find('{')
        .and_then(|open| {
            let close = key[open + 1..].find('}')?;
            (close > 0).then(|| &bytes[open + 1..open + 1 + close])
        })
        .unwrap_or(bytes);
    crc16(tagged) % HASH_SLOTS
}

fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |mut crc, b| {
        crc ^= u16::from(*b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
        crc
    })
}

/// Hash slot ranges and the node (`host:port`) owning each.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct HashSlotMap {
    ranges: Vec<(u16, u16, usize)>,
    pub(crate) nodes: Vec<String>,
}

impl HashSlotMap {
    /// Every hash slot on one node (a single Redis).
    pub(crate) fn single(node: String) -> Self {
        Self {
            ranges: vec![(0, HASH_SLOTS - 1, 0)],
            nodes: vec![node],
        }
    }

    /// Builds the map from `(first, last, "host:port")` rows of `CLUSTER SLOTS`.
    pub(crate) fn from_rows(rows: Vec<(u16, u16, String)>) -> Self {
        let mut map = Self::default();
        for (first, last, node) in rows {
            let index = match map.nodes.iter().position(|n| *n == node) {
                Some(i) => i,
                None => {
                    map.nodes.push(node);
                    map.nodes.len() - 1
                }
            };
            map.ranges.push((first, last, index));
        }
        map.ranges.sort_unstable();
        map
    }

    /// The index (into `nodes`) of the node owning `hash_slot`.
    pub(crate) fn node_of(&self, hash_slot: u16) -> Option<usize> {
        self.ranges
            .iter()
            .find(|(a, b, _)| (*a..=*b).contains(&hash_slot))
            .map(|(_, _, n)| *n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_slots_match_redis() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(hash_slot("foo"), 12182);
        assert_eq!(
            hash_slot("{user1000}.following"),
            hash_slot("{user1000}.followers")
        );
        assert_eq!(hash_slot("123456789"), 0x31C3 % HASH_SLOTS);
        // An empty tag does not count: the whole key is hashed.
        assert_eq!(hash_slot("{}abc"), crc16(b"{}abc") % HASH_SLOTS);
    }

    #[test]
    fn hash_slot_map_lookup() {
        let m = HashSlotMap::from_rows(vec![
            (0, 5460, "a".into()),
            (5461, 10922, "b".into()),
            (10923, 16383, "c".into()),
        ]);
        assert_eq!(m.node_of(0), Some(0));
        assert_eq!(m.node_of(10922), Some(1));
        assert_eq!(m.node_of(16383), Some(2));
    }
}
