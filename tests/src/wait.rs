//! Bounded polling: the only way the harness waits for anything.

use std::thread;
use std::time::{Duration, Instant};

/// One look at the thing being waited for.
pub enum Probe<T> {
    /// It is there.
    Ready(T),
    /// Not yet; look again.
    Pending,
    /// It will never be there (for example, the process exited): stop waiting.
    Failed(String),
}

/// Polls `probe` until it is ready, it fails, or `timeout` passes. Polls often at
/// first (10 ms) and backs off to every 100 ms.
pub fn wait_for<T>(
    timeout: Duration,
    what: &str,
    mut probe: impl FnMut() -> Probe<T>,
) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(10);
    loop {
        match probe() {
            Probe::Ready(value) => return Ok(value),
            Probe::Failed(why) => return Err(format!("{what}: {why}")),
            Probe::Pending => {}
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(format!("timed out after {timeout:?} waiting for {what}"));
        }
        thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// Waits until `condition` holds; panics naming `what` if it does not within
/// `timeout`. For tests: `eventually(Duration::from_secs(5), "rules reloaded", || ...)`.
pub fn eventually(timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let result = wait_for(timeout, what, || {
        if condition() {
            Probe::Ready(())
        } else {
            Probe::Pending
        }
    });
    if let Err(why) = result {
        panic!("{why}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_after_a_few_polls() {
        let mut n = 0;
        let got = wait_for(Duration::from_secs(5), "n to reach 3", || {
            n += 1;
            if n == 3 {
                Probe::Ready(n)
            } else {
                Probe::Pending
            }
        });
        assert_eq!(got, Ok(3));
    }

    #[test]
    fn failure_stops_at_once_and_names_what() {
        let started = Instant::now();
        let got: Result<(), String> = wait_for(Duration::from_secs(30), "thing", || {
            Probe::Failed("gone".into())
        });
        assert_eq!(got, Err("thing: gone".to_string()));
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn times_out_with_a_clear_message() {
        let got: Result<(), String> =
            wait_for(Duration::from_millis(50), "never", || Probe::Pending);
        let err = got.unwrap_err();
        assert!(err.contains("timed out") && err.contains("never"), "{err}");
    }
}
