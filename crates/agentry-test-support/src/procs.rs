//! Finding a test's own processes on a shared machine, for the tests that check
//! that no process outlives its call.

use std::sync::atomic::{AtomicU64, Ordering};

/// `secs` with a fraction unique to this invocation ("7122.418305"): the
/// process scans find this test's sleeps only, never those of another run of
/// the suite on the same machine.
pub fn unique_secs(secs: u32) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let mix = u64::from(std::process::id()) * 7_919
        + u64::from(nanos)
        + NEXT.fetch_add(1, Ordering::Relaxed) * 104_729;
    format!("{secs}.{:06}", mix % 1_000_000)
}

/// Alive (not zombie) processes whose command line is exactly `argv`.
pub fn alive_with_cmdline(argv: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let (Ok(cmdline), Ok(stat)) = (
            std::fs::read(entry.path().join("cmdline")),
            std::fs::read_to_string(entry.path().join("stat")),
        ) else {
            continue;
        };
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].trim().chars().next());
        if cmdline == want && state != Some('Z') {
            found.push(pid);
        }
    }
    found
}

/// A child of process `ppid` one of whose arguments is `name` (e.g. the
/// warden a runtime started: `agentry-warden`), if one runs now.
pub fn child_named(ppid: u32, name: &str) -> Option<i32> {
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse::<u32>().ok());
        if parent == Some(ppid) && cmdline.split(|b| *b == 0).any(|arg| arg == name.as_bytes()) {
            return Some(pid);
        }
    }
    None
}

/// A descendant of process `ancestor` one of whose arguments is `name`, if
/// one runs now: a sandboxed program is the grandchild of the process that
/// spawned it (the sandbox's leader waits for it in between).
pub fn descendant_named(ancestor: u32, name: &str) -> Option<i32> {
    let parent_of = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    alive_with_cmdline(&[name]).into_iter().find(|&pid| {
        let mut at = u32::try_from(pid).ok();
        while let Some(p) = at.and_then(parent_of) {
            if p == ancestor {
                return true;
            }
            at = (p > 1).then_some(p);
        }
        false
    })
}

/// Alive (not zombie) processes in process group `pgid`.
pub fn alive_in_group(pgid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // After the command's closing parenthesis: state, ppid, pgrp, ...
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().take(3).collect())
            .unwrap_or_default();
        if let [state, _ppid, pgrp] = fields.as_slice()
            && *state != "Z"
            && pgrp.parse::<i32>() == Ok(pgid)
        {
            found.push(pid);
        }
    }
    found
}

/// Sleeps that prove they ran: each writes its own pid to a file and then
/// becomes `sleep SECS` in the same process (`exec`), so a test that finds no
/// such sleep alive afterwards also shows that it lived.
pub struct Sleepers {
    dir: tempfile::TempDir,
}

impl Sleepers {
    /// A directory holding the sleeper script and, later, the pidfiles.
    pub fn new() -> std::io::Result<Sleepers> {
        let dir = tempfile::tempdir()?;
        // Written under another name and moved, so a reader sees the whole pid.
        std::fs::write(
            dir.path().join("sleeper.sh"),
            "echo $$ > \"$1.tmp\" && mv \"$1.tmp\" \"$1\" && exec sleep \"$2\"\n",
        )?;
        Ok(Sleepers { dir })
    }

    /// Shell words that start sleeper `name` for `secs` (a [`unique_secs`]).
    pub fn start(&self, name: &str, secs: &str) -> String {
        let dir = self.dir.path().display();
        format!("sh {dir}/sleeper.sh {dir}/{name}.pid {secs}")
    }

    /// Shell text that returns once every sleeper in `names` has written its
    /// pid (or after about 5 s, when one never ran), so the command that
    /// started them cannot end before they run.
    pub fn wait_for(&self, names: &[&str]) -> String {
        let dir = self.dir.path().display();
        let tests: Vec<String> = names
            .iter()
            .map(|name| format!("[ -s {dir}/{name}.pid ]"))
            .collect();
        format!(
            "n=0; until {} || [ $n -ge 500 ]; do n=$((n+1)); sleep 0.01; done",
            tests.join(" && ")
        )
    }

    /// The directory the pidfiles go to (a sandboxed command needs it
    /// writable: `SandboxSpec::write`).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The pid sleeper `name` wrote, if it ever ran.
    pub fn pid(&self, name: &str) -> Option<i32> {
        let path = self.dir.path().join(format!("{name}.pid"));
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    }
}
