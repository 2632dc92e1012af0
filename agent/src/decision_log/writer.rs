//! The writer thread: lines from the queue to stdout, or to a file rotated by
//! size (`path` → `path.1` → … → `path.<files-1>`, the oldest deleted), so the
//! log never takes more than `max_bytes × files` of disk.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;

use super::Target;
use crate::metrics::Metrics;

pub(super) enum Out {
    Stdout(io::Stdout),
    Files(Rotating),
}

pub(super) struct Rotating {
    path: PathBuf,
    max_bytes: u64,
    files: u32,
    file: File,
    size: u64,
}

impl Out {
    pub(super) fn open(target: &Target) -> io::Result<Out> {
        Ok(match target {
            Target::Stdout => Out::Stdout(io::stdout()),
            Target::Files {
                path,
                max_bytes,
                files,
            } => {
                let file = OpenOptions::new().create(true).append(true).open(path)?;
                let size = file.metadata()?.len();
                Out::Files(Rotating {
                    path: path.clone(),
                    max_bytes: *max_bytes,
                    files: (*files).max(1),
                    file,
                    size,
                })
            }
        })
    }

    fn write(&mut self, line: &[u8]) -> io::Result<()> {
        match self {
            Out::Stdout(out) => out.lock().write_all(line),
            Out::Files(r) => r.write(line),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Out::Stdout(out) => out.lock().flush(),
            Out::Files(r) => r.file.flush(),
        }
    }
}

impl Rotating {
    fn write(&mut self, line: &[u8]) -> io::Result<()> {
        let len = u64::try_from(line.len()).unwrap_or(u64::MAX);
        if self.size > 0 && self.size.saturating_add(len) > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.size = self.size.saturating_add(len);
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        if self.files > 1 {
            for i in (1..self.files - 1).rev() {
                let from = numbered(&self.path, i);
                if from.exists() {
                    std::fs::rename(&from, numbered(&self.path, i + 1))?;
                }
            }
            std::fs::rename(&self.path, numbered(&self.path, 1))?;
        }
        self.file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

/// `path.n`.
fn numbered(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// Writes what the queue brings until every sender is gone; flushes whenever
/// the queue is empty. A failed write loses that line (counted) and goes on.
pub(super) fn run(mut out: Out, rx: Receiver<Vec<u8>>, metrics: &Metrics) {
    let mut failing = false;
    while let Ok(line) = rx.recv() {
        let mut batch = vec![line];
        batch.extend(rx.try_iter().take(1_024));
        let mut written = 0;
        for line in &batch {
            match out.write(line) {
                Ok(()) => written += 1,
                Err(e) => {
                    metrics.decision_log_dropped("agent", 1);
                    if !failing {
                        tracing::warn!("decision log: write failed: {e}");
                        failing = true;
                    }
                }
            }
        }
        if let Err(e) = out.flush() {
            if !failing {
                tracing::warn!("decision log: flush failed: {e}");
                failing = true;
            }
        } else if written > 0 {
            failing = false;
        }
        metrics.decision_log_written(written);
    }
}
