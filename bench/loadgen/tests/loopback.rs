//! The generator against a tiny loopback server: the schedule holds, every
//! answer is counted, and unique keys are unique.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use meshlimit_loadgen::{run, LoadOptions, Target};

type Seen = Arc<Mutex<HashSet<String>>>;

fn serve(listener: TcpListener, seen: Seen) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { return };
        let seen = Arc::clone(&seen);
        thread::spawn(move || answer(stream, &seen));
    }
}

fn answer(stream: TcpStream, seen: &Mutex<HashSet<String>>) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some(v) = line.strip_prefix("x-key: ") {
            seen.lock().unwrap().insert(v.trim().to_string());
        }
        if line == "\r\n"
            && writer
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n")
                .is_err()
        {
            return;
        }
    }
}

#[test]
fn holds_the_rate_and_counts_every_answer() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Seen = Arc::default();
    let server_seen = Arc::clone(&seen);
    thread::spawn(move || serve(listener, server_seen));

    let target = Target::parse(&format!("http://127.0.0.1:{port}/x")).unwrap();
    let mut options = LoadOptions::new(target, 2_000.0, Duration::from_millis(500))
        .unwrap()
        .header("x-bench: 1")
        .unwrap();
    options.warmup = Duration::from_millis(100);
    options.connections = 4;
    options.unique_header = Some("x-key".into());
    let summary = run(&options).unwrap();

    assert_eq!(summary.errors + summary.dropped, 0, "{summary:?}");
    assert_eq!(summary.issued, 1_200, "{summary:?}");
    assert_eq!(summary.completed, 1_000, "{summary:?}");
    assert_eq!(summary.status.get(&200), Some(&1_000));
    assert!(summary.latency_us.p50 > 0.0 && summary.latency_us.p50 <= summary.latency_us.p999);
    // Every request, warm-up included, carried its own key.
    assert_eq!(seen.lock().unwrap().len(), 1_200);
}
