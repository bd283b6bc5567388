//! Bounded capture of one output stream.
//!
//! Memory per stream is the inline head (at most `max_inline` bytes) plus one read
//! buffer, whatever the process prints. The sha256 and length cover the *full*
//! stream and are computed while it flows. The full stream goes to a file only
//! once it outgrows the head: the file then receives the head followed by
//! everything after it, so small outputs leave no files behind.

use std::path::{Path, PathBuf};

use agentry_protocol::envelope::ResourceRef;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

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
    path: PathBuf,
    file: Option<tokio::fs::File>,
    /// Problems met while capturing (artifact not writable, read error). The head,
    /// length and hash stay right; only the artifact is missing or short.
    problems: Vec<String>,
    artifact_failed: bool,
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
    /// A capture keeping `cap` bytes inline and spilling to `path` past that.
    pub(super) fn new(cap: usize, path: PathBuf) -> Self {
        Capture {
            cap,
            head: Vec::with_capacity(cap.min(READ_CHUNK)),
            hasher: Sha256::new(),
            total: 0,
            path,
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
        if let Some(dir) = self.path.parent() {
            tokio::fs::create_dir_all(dir).await?;
        }
        let mut file = tokio::fs::File::create(&self.path).await?;
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
            path: shown_path(workdir, &self.path),
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

/// `path` relative to `workdir` when inside it (with `/` separators), else absolute.
fn shown_path(workdir: &Path, path: &Path) -> String {
    let relative = path
        .strip_prefix(workdir)
        .ok()
        .map(Path::to_path_buf)
        .or_else(|| {
            let workdir = std::fs::canonicalize(workdir).ok()?;
            let path = std::fs::canonicalize(path).ok()?;
            path.strip_prefix(&workdir).ok().map(Path::to_path_buf)
        });
    match relative {
        Some(rel) => rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/"),
        None => path.display().to_string(),
    }
}
