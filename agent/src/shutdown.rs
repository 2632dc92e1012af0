//! One shutdown signal shared by every background task and the server: SIGTERM
//! (Kubernetes) or SIGINT (a terminal) flips it once; everyone watching stops.

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

/// The sending side: flips the signal once.
#[derive(Debug)]
pub struct ShutdownTrigger(watch::Sender<bool>);

/// A receiving side; clone one per task.
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

/// SIGTERM and SIGINT, registered up front so that a registration failure is a
/// startup error rather than a signal silently missed later.
#[derive(Debug)]
pub(crate) struct Signals {
    term: Signal,
    int: Signal,
}

/// A new, untriggered signal.
pub fn channel() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger(tx), Shutdown(rx))
}

impl ShutdownTrigger {
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// Resolves once shutdown has been triggered (or its trigger is gone, which
    /// means the agent is going away anyway).
    pub(crate) async fn wait(&mut self) {
        let _ = self.0.wait_for(|stop| *stop).await;
    }

    #[cfg(test)]
    pub(crate) fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }
}

impl Signals {
    pub fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Resolves on the first SIGTERM or SIGINT; returns its name.
    pub(crate) async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_clone_sees_the_trigger() {
        let (trigger, shutdown) = channel();
        let mut a = shutdown.clone();
        let waiter = tokio::spawn(async move { a.wait().await });
        assert!(!shutdown.is_triggered());
        trigger.trigger();
        waiter.await.unwrap();
        assert!(shutdown.is_triggered());
    }
}
