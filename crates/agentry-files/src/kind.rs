//! What a named file is: the name errors give it and the most agentry reads
//! of it.

/// One MiB.
const MIB: u64 = 1024 * 1024;

/// A kind of file read whole: its name in errors and its size cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileKind {
    name: &'static str,
    cap: u64,
}

impl FileKind {
    /// A task directory's `task.toml` (a hand-written file; an inline task's
    /// is written from a JSON body of a few KiB).
    pub const TASK_FILE: FileKind = FileKind::new("task file", 4 * MIB);
    /// A scripted policy (`script:FILE`, a task's `script.json`, a child's
    /// script): its turns may carry whole files for `fs.write`.
    pub const SCRIPT: FileKind = FileKind::new("script", 16 * MIB);
    /// A PEM bundle of CA certificates (`SSL_CERT_FILE`, `ca_cert`): a
    /// distribution's whole bundle is a few hundred KiB.
    pub const CA_FILE: FileKind = FileKind::new("CA file", 4 * MIB);
    /// A file holding a secret token (a server's `--token-file`).
    pub const TOKEN_FILE: FileKind = FileKind::new("token file", 64 * 1024);

    /// A kind named `name` (as in "too large for a {name}"), read up to `cap` bytes.
    pub const fn new(name: &'static str, cap: u64) -> FileKind {
        FileKind { name, cap }
    }

    /// Its name in errors.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The most bytes read of a file of this kind.
    pub const fn cap(&self) -> u64 {
        self.cap
    }
}

/// A kind of file read line by line: its name in errors and the most one line
/// may hold (the file itself may be as long as it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineKind {
    name: &'static str,
    max_line: u64,
}

impl LineKind {
    /// A JSONL trace (`agentry run --trace`): one step record per line, which
    /// holds that step's results, each capped far below this.
    pub const TRACE: LineKind = LineKind::new("trace", 64 * MIB);

    /// A kind named `name`, whose lines hold at most `max_line` bytes (the
    /// newline not counted).
    pub const fn new(name: &'static str, max_line: u64) -> LineKind {
        LineKind { name, max_line }
    }

    /// Its name in errors.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The most bytes one line may hold, its newline not counted.
    pub const fn max_line(&self) -> u64 {
        self.max_line
    }
}
