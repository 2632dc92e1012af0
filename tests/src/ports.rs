//! Free loopback ports for the processes a test starts.
//!
//! cargo-nextest runs every test in a process of its own, several at a time, so a
//! port must be unique across processes, not only within one: a port this
//! process handed out but whose server has not bound it yet (or that an agent
//! is restarting on) looks free to another test process. Each port handed out
//! is therefore also reserved by an advisory lock on a file named after it in
//! the temporary directory, held until this process exits (the kernel drops
//! the lock then, whatever way it ends); another process skips a port whose
//! file it cannot lock.

use std::collections::hash_map::RandomState;
use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::sync::Mutex;

/// Ports already handed out by this process, so parallel tests in one test
/// binary never get the same port even before its server has bound it.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// The lock files of the ports this process holds, open for its lifetime.
static RESERVED: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// Lowest port we pick from. Ports are taken below the kernel's ephemeral range
/// (where outgoing connections get their local ports, so a port taken from it
/// could be grabbed by a client socket before our server binds it, or before an
/// agent restarts on the same port).
const LOW: u16 = 15_000;

/// A port on 127.0.0.1 that was free when this returned and that this process has
/// not handed out before. Falls back to one the kernel picks (bind to port 0).
pub fn free_port() -> u16 {
    let mut taken = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let high = ephemeral_low().max(LOW + 1_000);
    let span = u64::from(high - LOW);
    let start = random_u64() % span;
    for i in 0..span {
        let port = LOW + ((start + i) % span) as u16;
        if !taken.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() && reserve(port)
        {
            taken.insert(port);
            return port;
        }
    }
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind 127.0.0.1:0")
            .port();
        if !taken.contains(&port) && reserve(port) {
            taken.insert(port);
            return port;
        }
    }
}

/// Takes `port` for this process across every test process of the machine:
/// false when another process holds it. Where no lock file can be made (no
/// writable temporary directory), the port is taken on this process's word
/// alone, as before such locks.
fn reserve(port: u16) -> bool {
    let dir = std::env::temp_dir().join("meshlimit-test-ports");
    let _ = std::fs::create_dir_all(&dir);
    let Ok(file) = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(port.to_string()))
    else {
        return true;
    };
    if file.try_lock().is_err() {
        return false;
    }
    RESERVED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(file);
    true
}

/// The first port of the kernel's ephemeral range (32768 on Linux by default).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A random number from std's per-process random hasher keys (no `rand` needed),
/// so two test processes start their search at different ports.
fn random_u64() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
        for port in ports {
            if ephemeral_low() > LOW + 1_000 {
                assert!(port < ephemeral_low(), "{port}");
            }
            TcpListener::bind(("127.0.0.1", port)).unwrap();
        }
    }

    #[test]
    fn a_port_another_process_holds_is_not_handed_out() {
        let port = free_port();
        // A second process (a child of this one, as nextest's are siblings)
        // tries the port's lock: it must fail while this process holds it.
        let lock = std::env::temp_dir()
            .join("meshlimit-test-ports")
            .join(port.to_string());
        let script = format!("flock -n {} true", lock.display());
        let status = std::process::Command::new("sh")
            .args(["-c", &script])
            .status()
            .unwrap();
        assert!(
            !status.success(),
            "another process locked port {port}'s file"
        );
    }
}
