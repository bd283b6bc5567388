//! The fenced code blocks of the docs' Markdown files, with where they are.

use std::path::{Path, PathBuf};

/// One fenced block: ```` ```LANG,ATTR,ATTR ```` ... ```` ``` ````.
pub(super) struct Block {
    /// The file, relative to the workspace root.
    pub(super) file: PathBuf,
    /// 1-based line of the opening fence.
    pub(super) line: usize,
    /// The info string's first word (`sh`, `toml`, `rust`, ...).
    pub(super) lang: String,
    /// The info string's other words (`no_run`, `ignore`, `excerpt=FILE`).
    pub(super) attrs: Vec<String>,
    /// The lines between the fences, the fence's indentation taken off.
    pub(super) body: String,
}

impl Block {
    /// `FILE:LINE` of the opening fence, and the info string.
    pub(super) fn at(&self) -> String {
        let mut info = self.lang.clone();
        for attr in &self.attrs {
            info.push(',');
            info.push_str(attr);
        }
        format!("{}:{} (```{info})", self.file.display(), self.line)
    }

    pub(super) fn has(&self, attr: &str) -> bool {
        self.attrs.iter().any(|a| a == attr)
    }

    /// The value of a `key=value` attribute.
    pub(super) fn value(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find_map(|a| a.strip_prefix(key)?.strip_prefix('='))
    }
}

/// README.md and every Markdown file under docs/src, in a fixed order.
pub(super) fn doc_files(root: &Path) -> Vec<PathBuf> {
    // docs/cluster.md is the book's cluster page too (docs/src/cluster.md
    // includes it).
    let mut files = vec![PathBuf::from("README.md"), PathBuf::from("docs/cluster.md")];
    let mut dirs = vec![PathBuf::from("docs/src")];
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(root.join(&dir))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        entries.sort();
        for name in entries {
            let rel = dir.join(&name);
            if root.join(&rel).is_dir() {
                dirs.push(rel);
            } else if rel.extension().is_some_and(|e| e == "md") {
                files.push(rel);
            }
        }
    }
    files
}

/// Every fenced block of every doc file.
pub(super) fn all_blocks(root: &Path) -> Vec<Block> {
    doc_files(root)
        .into_iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(root.join(&file)).unwrap();
            blocks_of(&file, &text)
        })
        .collect()
}

/// The fenced blocks of one Markdown text (``` or ~~~ fences, indented ones
/// in list items included).
pub(super) fn blocks_of(file: &Path, text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<(Block, String, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let lead = line.len() - trimmed.len();
        match open.take() {
            None => open = opening(file, i + 1, trimmed).map(|b| (b, fence_of(trimmed), lead)),
            Some((block, fence, _)) if closes(trimmed, &fence) => blocks.push(block),
            Some((mut block, fence, indent)) => {
                block.body.push_str(&line[lead.min(indent)..]);
                block.body.push('\n');
                open = Some((block, fence, indent));
            }
        }
    }
    blocks
}

fn fence_of(line: &str) -> String {
    let first = line.chars().next().unwrap_or('`');
    line.chars().take_while(|&c| c == first).collect()
}

fn opening(file: &Path, line: usize, trimmed: &str) -> Option<Block> {
    if !(trimmed.starts_with("```") || trimmed.starts_with("~~~")) {
        return None;
    }
    let info = trimmed[fence_of(trimmed).len()..].trim();
    let mut words = info
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty())
        .map(str::to_string);
    Some(Block {
        file: file.to_path_buf(),
        line,
        lang: words.next().unwrap_or_default(),
        attrs: words.collect(),
        body: String::new(),
    })
}

fn closes(trimmed: &str, fence: &str) -> bool {
    let first = fence.chars().next().unwrap_or('`');
    let run = trimmed.chars().take_while(|&c| c == first).count();
    run >= fence.len() && trimmed[run..].trim().is_empty()
}

#[test]
fn blocks_are_found_with_their_info_and_line() {
    let text = "# T\n\n```sh,no_run\n# why\nagentry runs\n```\n\n- item\n\n  ```toml\n  goal = \"g\"\n  ```\n";
    let blocks = blocks_of(Path::new("x.md"), text);
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        (blocks[0].lang.as_str(), blocks[0].line),
        ("sh", 3),
        "{}",
        blocks[0].at()
    );
    assert!(blocks[0].has("no_run"));
    assert_eq!(blocks[0].body, "# why\nagentry runs\n");
    assert_eq!(blocks[1].lang, "toml");
    assert_eq!(blocks[1].body, "goal = \"g\"\n");
}
