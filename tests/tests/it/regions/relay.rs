//! A TCP relay in front of a redis-server that a test cuts and restores: the
//! network between regions, made real on one host. Cut, it closes every
//! connection it carries and every connection it is offered, as a firewall that
//! rejects does; restored, it forwards again. Only what goes through it is cut:
//! a region's own agents reach their Redis directly.

use std::io::{self, ErrorKind};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

pub struct Relay {
    port: u16,
    state: Arc<State>,
    accept: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct State {
    cut: AtomicBool,
    stop: AtomicBool,
    /// Both ends of every connection carried, so a cut can close them.
    live: Mutex<Vec<TcpStream>>,
}

impl Relay {
    /// Forwards a loopback port to `upstream` (a port on 127.0.0.1).
    pub fn start(upstream: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let shared = state.clone();
        let accept = std::thread::spawn(move || accept_loop(&listener, upstream, &shared));
        Relay {
            port,
            state,
            accept: Some(accept),
        }
    }

    /// The Redis URL that goes through the relay.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Closes every connection carried and refuses new ones until restored.
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        self.state.close_all();
    }

    pub fn restore(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        self.state.close_all();
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

impl State {
    fn close_all(&self) {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        for s in live.drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(listener: &TcpListener, upstream: u16, state: &State) {
    while !state.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) if state.cut.load(Ordering::SeqCst) => {
                let _ = client.shutdown(Shutdown::Both);
            }
            Ok((client, _)) => {
                // A connection the upstream refuses is closed, as the cut does.
                let _ = carry(client, upstream, state);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(_) => return,
        }
    }
}

/// Forwards one connection both ways, each way on its own thread.
fn carry(client: TcpStream, upstream: u16, state: &State) -> io::Result<()> {
    client.set_nonblocking(false)?;
    let server = TcpStream::connect(("127.0.0.1", upstream))?;
    // Redis commands are small writes: without this Nagle's algorithm and
    // delayed acks would add tens of milliseconds a round trip.
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    {
        let mut live = state.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.push(client.try_clone()?);
        live.push(server.try_clone()?);
    }
    let (c2, s2) = (client.try_clone()?, server.try_clone()?);
    std::thread::spawn(move || pipe(client, server));
    std::thread::spawn(move || pipe(s2, c2));
    Ok(())
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let _ = io::copy(&mut from, &mut to);
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
