//! The writer thread: lines from the queue to stdout, or to a file rotated by
//! size (`path` → `path.1` → … → `path.<files-1>`, the oldest deleted), so the
//! log never takes more than `max_bytes × files` of disk.
//!
//! The files may hold keys in clear (`log_key: clear`): each is its owner's
//! alone ([`FILE_MODE`], an existing one restricted on open), and no symbolic
//! link is followed. A link at the log path or at a rotated name is refused,
//! at start (an error) and at rotation (the lines are dropped and counted),
//! so a link planted there never sends the log, or a truncation, elsewhere.
//! A file is created with `O_EXCL` (which does not follow a link), and an
//! existing one is opened without creating and checked to be the same file
//! its path names.

use std::fs::{File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;

use super::DecisionLogMetrics;
use super::Target;

/// A decision log file's mode: read and written by its owner only.
pub(super) const FILE_MODE: u32 = 0o600;

/// Why a decision log file is not opened.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refused {
    #[error("{0}: a symbolic link; the decision log does not follow links")]
    Link(PathBuf),
    #[error("{0}: not a regular file")]
    NotAFile(PathBuf),
    #[error("{0}: replaced while it was opened")]
    Replaced(PathBuf),
    #[error("{0}: something is there already (a file or a link put there since it was looked at)")]
    Appeared(PathBuf),
}

impl From<Refused> for io::Error {
    fn from(r: Refused) -> io::Error {
        io::Error::other(r)
    }
}

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
                let file = open_current(path)?;
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

    /// Renames `path.n` to `path.n+1` (the oldest is replaced) and `path` to
    /// `path.1`, then creates `path` anew. Renaming moves a link, never what
    /// it points at; a link at any of the names is refused all the same.
    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        for i in 0..self.files {
            no_link(&numbered(&self.path, i))?;
        }
        if self.files > 1 {
            for i in (1..self.files - 1).rev() {
                let from = numbered(&self.path, i);
                if no_link(&from)? {
                    std::fs::rename(&from, numbered(&self.path, i + 1))?;
                }
            }
            // A log removed by hand since is simply started again.
            if no_link(&self.path)? {
                std::fs::rename(&self.path, numbered(&self.path, 1))?;
            }
        } else if no_link(&self.path)? {
            std::fs::remove_file(&self.path)?;
        }
        self.file = create_new(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

/// Whether `path` exists, refusing a link there: `false` when nothing is.
fn no_link(path: &Path) -> io::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(Refused::Link(path.to_path_buf()).into()),
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// The log file at `path`, for appending: created when there is none, else
/// the regular file there, which must still be the one the path names once
/// open (a link put in its place since is caught, and was not created
/// through: the open does not create).
fn open_current(path: &Path) -> io::Result<File> {
    let before = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return create_new(path),
        Err(e) => return Err(e),
        Ok(m) if m.file_type().is_symlink() => return Err(Refused::Link(path.into()).into()),
        Ok(m) if !m.is_file() => return Err(Refused::NotAFile(path.into()).into()),
        Ok(m) => m,
    };
    let file = OpenOptions::new().append(true).open(path)?;
    let opened = file.metadata()?;
    if (opened.dev(), opened.ino()) != (before.dev(), before.ino()) {
        return Err(Refused::Replaced(path.into()).into());
    }
    file.set_permissions(Permissions::from_mode(FILE_MODE))?;
    Ok(file)
}

/// A new log file at `path`, its owner's only; whatever is at `path`
/// already, a link included, is refused (`O_EXCL`).
fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => Refused::Appeared(path.into()).into(),
            _ => e,
        })
}

/// `path.n`; `path` itself for 0.
fn numbered(path: &Path, n: u32) -> PathBuf {
    if n == 0 {
        return path.to_path_buf();
    }
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// Writes what the queue brings until every sender is gone; flushes whenever
/// the queue is empty. A failed write loses that line (counted) and goes on.
/// Each line's bytes come off `queued` once it is written (or lost).
pub(super) fn run(
    mut out: Out,
    rx: Receiver<Vec<u8>>,
    queued: &AtomicUsize,
    metrics: &DecisionLogMetrics,
) {
    let mut failing = false;
    while let Ok(line) = rx.recv() {
        let mut batch = vec![line];
        batch.extend(rx.try_iter().take(1_024));
        let mut written = 0;
        for line in &batch {
            let result = out.write(line);
            queued.fetch_sub(line.len(), Ordering::AcqRel);
            match result {
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
