//! The files a completed task hands back: each path its task declares
//! (task.toml's `artifacts`, kept in the run's `RunMeta`), read beneath the
//! run's working directory as acceptance checks read a file the model may
//! have shaped (`WorkRoot`: no link out, no link at the path itself, a
//! regular file only, opened without blocking, at most a cap).
//!
//! ```text
//! UTF-8 text       {"text": CONTENT, "filename": NAME, "mediaType": TYPE}
//! other bytes      {"raw": BASE64,   "filename": NAME, "mediaType": TYPE}
//! past the cap     {"text": "PATH is N bytes, ...: not sent"}
//! unreadable       {"text": "PATH: not sent: WHY"}   (a link, a directory, a FIFO...)
//! missing          no artifact
//! ```

use std::path::Path;

use agentry::tools::fs::{PathError, WorkRoot};
use base64::Engine as _;
use serde_json::{Value, json};

/// The most one file's artifact holds: 1 MiB.
pub(super) const MAX_ARTIFACT_BYTES: u64 = 1024 * 1024;

/// The artifacts of task `id`'s declared `paths` in `workdir`, in the
/// declared order; a missing file (or a missing directory) has none.
/// Blocking.
pub(super) fn read(id: &str, workdir: &Path, paths: &[String]) -> Vec<Value> {
    if paths.is_empty() {
        return Vec::new();
    }
    let root = match WorkRoot::open(workdir) {
        Ok(root) => Ok(root),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => Err(format!("the working directory cannot be opened: {e}")),
    };
    paths
        .iter()
        .enumerate()
        .filter_map(|(index, path)| {
            let part = match &root {
                Ok(root) => part(root, path)?,
                Err(why) => note(&format!("{path}: not sent: {why}")),
            };
            Some(json!({
                "artifactId": format!("{id}-file-{index}"),
                "name": path,
                "parts": [part],
            }))
        })
        .collect()
}

/// The part of one declared file; `None` when it does not exist.
fn part(root: &WorkRoot, path: &str) -> Option<Value> {
    let bytes = match root.read_file(path, MAX_ARTIFACT_BYTES, false) {
        Ok(bytes) => bytes,
        Err(PathError::NotFound) => return None,
        Err(PathError::TooLarge { bytes, cap }) => {
            return Some(note(&format!(
                "{path} is {bytes} bytes, larger than the {cap} bytes an artifact holds: not sent"
            )));
        }
        Err(e) => return Some(note(&format!("{path}: not sent: {e}"))),
    };
    let filename = Path::new(path)
        .file_name()
        .map_or_else(|| path.to_string(), |n| n.to_string_lossy().into_owned());
    Some(match String::from_utf8(bytes) {
        Ok(text) => json!({
            "text": text,
            "filename": filename,
            "mediaType": media_type(path, true),
        }),
        Err(e) => json!({
            "raw": base64::engine::general_purpose::STANDARD.encode(e.as_bytes()),
            "filename": filename,
            "mediaType": media_type(path, false),
        }),
    })
}

fn note(text: &str) -> Value {
    json!({"text": text, "mediaType": "text/plain"})
}

/// A file's media type by its extension; else `text/plain` for text and
/// `application/octet-stream` for other bytes.
fn media_type(path: &str, text: bool) -> &'static str {
    let extension = Path::new(path)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let known = match extension.as_deref() {
        Some("md" | "markdown") => Some("text/markdown"),
        Some("txt" | "log") => Some("text/plain"),
        Some("json") => Some("application/json"),
        Some("csv") => Some("text/csv"),
        Some("html" | "htm") => Some("text/html"),
        Some("xml") => Some("application/xml"),
        Some("yaml" | "yml") => Some("application/yaml"),
        Some("toml") => Some("application/toml"),
        Some("svg") => Some("image/svg+xml"),
        Some("png") => Some("image/png"),
        Some("jpg" | "jpeg") => Some("image/jpeg"),
        Some("gif") => Some("image/gif"),
        Some("pdf") => Some("application/pdf"),
        Some("zip") => Some("application/zip"),
        Some("gz") => Some("application/gzip"),
        Some(_) | None => None,
    };
    match (known, text) {
        (Some(known), _) => known,
        (None, true) => "text/plain",
        (None, false) => "application/octet-stream",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn declared_files_are_read_beneath_the_workdir_and_links_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("out")).unwrap();
        std::fs::write(root.join("out/report.md"), "# done\n").unwrap();
        std::fs::write(root.join("blob.bin"), [0xff, 0x00, 0x01]).unwrap();
        std::fs::write(root.join("big.txt"), vec![b'a'; 1024 * 1024 + 1]).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s3cret").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("link.txt")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("away")).unwrap();
        let paths: Vec<String> = [
            "out/report.md",
            "missing.txt",
            "blob.bin",
            "big.txt",
            "link.txt",
            "away/secret",
        ]
        .map(String::from)
        .to_vec();
        let got = read("t1", root, &paths);
        let names: Vec<&str> = got.iter().map(|a| a["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "out/report.md",
                "blob.bin",
                "big.txt",
                "link.txt",
                "away/secret"
            ]
        );
        assert_eq!(
            got[0],
            json!({"artifactId": "t1-file-0", "name": "out/report.md", "parts": [
                {"text": "# done\n", "filename": "report.md", "mediaType": "text/markdown"}]})
        );
        assert_eq!(got[1]["artifactId"], "t1-file-2");
        assert_eq!(
            got[1]["parts"][0],
            json!({"raw": "/wAB", "filename": "blob.bin", "mediaType": "application/octet-stream"})
        );
        let big = got[2]["parts"][0]["text"].as_str().unwrap();
        assert!(big.contains("1048577 bytes"), "{big}");
        for link in &got[3..] {
            let text = link["parts"][0]["text"].as_str().unwrap();
            assert!(text.contains("not sent"), "{text}");
            assert!(!text.contains("s3cret"), "{text}");
        }
        assert!(read("t1", &root.join("gone"), &paths).is_empty());
    }
}
