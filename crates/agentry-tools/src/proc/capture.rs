//! Bounded capture of one output stream.
//!
//! Memory per stream is the inline head (at most `max_inline` bytes) plus one read
//! buffer, whatever the process prints. The sha256 and length cover the *full*
//! stream and are computed while it flows. The full stream goes to a file only
//! once it outgrows the head: the file then receives the head followed by
//! everything after it, so small outputs leave no files behind.
//!
//! The model's tools can write in the working directory, where the artifacts
//! live by default, so the artifact is never opened by name: its directory is
//! opened beneath the run's root with every component a real directory (a link
//! is refused), and the file is created in that handle with `O_CREAT | O_EXCL |
//! O_NOFOLLOW` after removing whatever was planted at its name
//! ([`create_exclusive`]). A link planted there is removed, never followed.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentry_protocol::envelope::ResourceRef;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::fs::{PathError, WorkRoot, create_exclusive};

/// Size of the read buffer: one pipe's worth of data per read, at most.
const READ_CHUNK: usize = 64 * 1024;

/// The capture of one stream, in progress.
#[derive(Debug)]
pub(super) struct Capture {
    cap: usize,
    head: Vec<u8>,
    hasher: Sha256,
    total: u64,
    /// Where the full stream goes once it is longer than `cap`.
    artifact: Artifact,
    /// `artifact`'s path, for messages and the reference.
    path: PathBuf,
    file: Option<tokio::fs::File>,
    /// Problems met while capturing (artifact not writable, read error). The head,
    /// length and hash stay right; only the artifact is missing or short.
    problems: Vec<String>,
    artifact_failed: bool,
}

/// Where one stream's artifact goes: `name` in the directory `dir`.
#[derive(Debug, Clone)]
pub(super) struct Artifact {
    /// The run's root: a `dir` under it is opened beneath it.
    pub(super) root: Arc<WorkRoot>,
    pub(super) dir: PathBuf,
    pub(super) name: OsString,
}

impl Artifact {
    /// Opens `dir` (created as needed; no link followed under the root, nor at
    /// its last component elsewhere) and creates the file exclusively.
    fn create(&self) -> Result<std::fs::File, PathError> {
        let dir = self.open_dir()?;
        create_exclusive(dir.as_fd(), &self.name)
    }

    fn open_dir(&self) -> Result<OwnedFd, PathError> {
        crate::artifacts::open_artifact_dir(&self.root, &self.dir)
    }
}

/// A finished capture.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Captured {
    /// The head as text (lossy UTF-8, cut at a character boundary, at most `cap` bytes).
    pub(super) text: String,
    /// The stream was longer than the head.
    pub(super) truncated: bool,
    /// Length of the full stream.
    pub(super) bytes: u64,
    /// The artifact holding the full stream, when truncated and it was written.
    pub(super) reference: Option<ResourceRef>,
    /// What went wrong, if anything (see [`Capture`]).
    pub(super) problems: Vec<String>,
}

impl Capture {
    /// A capture keeping `cap` bytes inline and spilling to `artifact` past that.
    pub(super) fn new(cap: usize, artifact: Artifact) -> Self {
        Capture {
            cap,
            head: Vec::with_capacity(cap.min(READ_CHUNK)),
            hasher: Sha256::new(),
            total: 0,
            path: artifact.dir.join(&artifact.name),
            artifact,
            file: None,
            problems: Vec::new(),
            artifact_failed: false,
        }
    }

    /// Reads `reader` to its end. Cancel safe in the sense that matters here:
    /// dropping it mid-way leaves a consistent (shorter) capture.
    pub(super) async fn pump<R: AsyncRead + Unpin>(&mut self, mut reader: R) {
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) => return,
                Ok(n) => self.push(&buf[..n]).await,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.problems
                        .push(format!("reading the stream failed: {e}"));
                    return;
                }
            }
        }
    }

    /// Adds one chunk: hash and count it, keep what fits in the head, and send
    /// the overflow (with the head, the first time) to the artifact.
    async fn push(&mut self, chunk: &[u8]) {
        self.hasher.update(chunk);
        self.total += chunk.len() as u64;
        let kept = (self.cap - self.head.len()).min(chunk.len());
        if kept > 0 {
            self.head.reserve_exact(kept);
            self.head.extend_from_slice(&chunk[..kept]);
        }
        let overflow = &chunk[kept..];
        if overflow.is_empty() || self.artifact_failed {
            return;
        }
        if self.file.is_none() {
            match self.open_artifact().await {
                Ok(file) => self.file = Some(file),
                Err(e) => {
                    self.fail_artifact(format!("creating {}", self.path.display()), &e);
                    return;
                }
            }
        }
        if let Some(file) = self.file.as_mut()
            && let Err(e) = file.write_all(overflow).await
        {
            self.fail_artifact(format!("writing {}", self.path.display()), &e);
        }
    }

    /// Creates the artifact (and its directory) and writes the head into it.
    async fn open_artifact(&self) -> std::io::Result<tokio::fs::File> {
        let artifact = self.artifact.clone();
        let file = tokio::task::spawn_blocking(move || artifact.create())
            .await
            .map_err(std::io::Error::other)?
            .map_err(|e| match e {
                PathError::Io(e) => e,
                other @ (PathError::Empty
                | PathError::Nul
                | PathError::Absolute
                | PathError::ParentDir
                | PathError::Escapes
                | PathError::DanglingLink
                | PathError::TooManyLinks
                | PathError::NotFound
                | PathError::NotADirectory
                | PathError::IsADirectory
                | PathError::IsALink
                | PathError::NotRegular { .. }
                | PathError::TooLarge { .. }
                | PathError::Protected
                | PathError::IsRoot
                | PathError::TooLong { .. }
                | PathError::TooDeep { .. }
                | PathError::Changed) => std::io::Error::other(other),
            })?;
        let mut file = tokio::fs::File::from_std(file);
        file.write_all(&self.head).await?;
        Ok(file)
    }

    fn fail_artifact(&mut self, doing: String, e: &std::io::Error) {
        self.artifact_failed = true;
        self.file = None;
        self.problems.push(format!(
            "the full output could not be stored ({doing}: {e}); only the head is available"
        ));
    }

    /// Completes the artifact and renders the head. `workdir` is used to show the
    /// artifact's path relative to it when it lies inside.
    pub(super) async fn finish(mut self, workdir: &Path) -> Captured {
        if let Some(mut file) = self.file.take() {
            // tokio's File writes in the background: flush waits for the last write.
            if let Err(e) = file.flush().await {
                self.fail_artifact(format!("writing {}", self.path.display()), &e);
            }
        }
        let truncated = self.total > self.head.len() as u64;
        let sha256 = hex::encode(self.hasher.finalize());
        let reference = (truncated && !self.artifact_failed).then(|| ResourceRef {
            path: crate::artifacts::shown_path(workdir, &self.path),
            sha256,
            bytes: self.total,
        });
        Captured {
            text: head_text(&self.head, truncated, self.cap),
            truncated,
            bytes: self.total,
            reference,
            problems: self.problems,
        }
    }

    /// Capacity of the inline head, for the memory-bound test.
    #[cfg(test)]
    pub(super) fn head_capacity(&self) -> usize {
        self.head.capacity()
    }
}

/// The head as text. A cut stream may end inside a multi-byte character: that
/// partial character is dropped rather than shown as U+FFFD. Other invalid bytes
/// become U+FFFD, and the result is cut back to at most `cap` bytes (replacement
/// characters are longer than the bytes they replace).
pub(super) fn head_text(head: &[u8], truncated: bool, cap: usize) -> String {
    let head = if truncated {
        &head[..complete_prefix_len(head)]
    } else {
        head
    };
    let mut text = String::from_utf8_lossy(head).into_owned();
    if text.len() > cap {
        let mut cut = cap;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

/// Length of `bytes` without a trailing, incomplete UTF-8 sequence.
fn complete_prefix_len(bytes: &[u8]) -> usize {
    // The last character starts at most 3 bytes before the end.
    let len = bytes.len();
    for back in 1..=len.min(4) {
        let byte = bytes[len - back];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue; // continuation byte: keep looking for the lead byte
        }
        let needed = match byte {
            0x00..=0x7f => 1,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => return len, // not a lead byte: invalid, leave it to the lossy pass
        };
        return if back < needed { len - back } else { len };
    }
    len
}
