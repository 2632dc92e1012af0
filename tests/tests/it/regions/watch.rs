//! Watching a run: every region's cached share polled on a thread, `redis-cli
//! MONITOR` on a server, and a random instant of a period to act at.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::mesh::{self, now, Mesh};
use super::plot::ShareSample;

/// Polls every region's cached share of `key` every 100 ms on a thread.
pub struct Watch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<ShareSample>>>,
}

impl Watch {
    pub fn start(mesh: &Mesh, key: &str, t0: f64) -> Watch {
        let urls: Vec<String> = (0..mesh.names.len())
            .map(|r| mesh.agent(r).url("/metrics"))
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, key) = (stop.clone(), key.to_string());
        let thread = std::thread::spawn(move || {
            let mut out = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let shares = urls
                    .iter()
                    .map(|u| {
                        let m = meshlimit_tests::try_request("GET", u, &[], None).ok()?;
                        mesh::share_of(&m.body, &key)
                    })
                    .collect();
                out.push((now() - t0, shares));
                std::thread::sleep(Duration::from_millis(100));
            }
            out
        });
        Watch {
            stop,
            thread: Some(thread),
        }
    }

    pub fn stop(mut self) -> Vec<ShareSample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// A random instant of a period, in [0, 1).
pub fn random_phase() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (random % 1_000) as f64 / 1_000.0
}

/// How long until `phase` into the next period (Unix seconds).
pub fn until_phase(phase: f64) -> Duration {
    let t = now();
    let wait = (t.floor() + 1.0 + phase) - t;
    Duration::from_secs_f64(wait)
}

/// `redis-cli MONITOR` on a server, its output kept in memory until stopped.
pub fn monitor(port: u16) -> Child {
    let child = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "monitor"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    child
}

pub fn stop_monitor(mut child: Child) -> String {
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}
