//! One simulated Envoy's shared data and clock: the filter's `Host` trait over an
//! in-memory map with the same compare-and-swap semantics as proxy-wasm's shared
//! data. A gateway runs on one thread, so interior mutability needs no lock.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Instant;

use meshlimit_filter::host::{Host, SharedError};

/// A gateway's shared data; time is nanoseconds since the run's start.
pub struct SimHost {
    epoch: Instant,
    data: RefCell<HashMap<String, (Vec<u8>, u32)>>,
}

impl SimHost {
    pub fn new(epoch: Instant) -> SimHost {
        SimHost {
            epoch,
            data: RefCell::new(HashMap::new()),
        }
    }
}

impl Host for SimHost {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        match self.data.borrow().get(key) {
            Some((value, cas)) => (Some(value.clone()), Some(*cas)),
            None => (None, None),
        }
    }

    fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), SharedError> {
        let mut data = self.data.borrow_mut();
        let current = data.get(key).map(|(_, c)| *c);
        if cas.is_some() && cas != current {
            return Err(SharedError::CasMismatch);
        }
        let next = current.unwrap_or(0).wrapping_add(1);
        data.insert(key.to_string(), (value.to_vec(), next));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_cas_is_refused() {
        let host = SimHost::new(Instant::now());
        assert_eq!(host.shared_set("k", b"a", None), Ok(()));
        let (_, cas) = host.shared_get("k");
        assert_eq!(host.shared_set("k", b"b", cas), Ok(()));
        assert_eq!(
            host.shared_set("k", b"c", cas),
            Err(SharedError::CasMismatch)
        );
        assert_eq!(host.shared_get("k").0.as_deref(), Some(&b"b"[..]));
    }
}
