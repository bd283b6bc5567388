//! Just enough of `/proc` to watch processes and memory: whether a pid is alive,
//! which processes share a process group, and this process's RSS.
//!
//! Linux only, like the workload's W4 definition (`/proc/<pid>/stat`).

use std::time::{Duration, Instant};

/// The fields of `/proc/<pid>/stat` the benchmarks use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// The pid.
    pub pid: i32,
    /// State letter: `R`, `S`, `D`, `Z` (zombie), `X` (dead), ...
    pub state: char,
    /// Parent pid.
    pub ppid: i32,
    /// Process group id.
    pub pgrp: i32,
}

impl ProcStat {
    /// Running or sleeping: neither a zombie nor dead.
    pub fn is_live(&self) -> bool {
        !matches!(self.state, 'Z' | 'X')
    }
}

/// Reads `/proc/<pid>/stat`; `None` when the process is gone.
pub fn stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
}

/// Parses a stat line. The command name is in parentheses and may itself
/// contain spaces and parentheses, so fields are counted from the last `)`.
fn parse_stat(pid: i32, text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgrp,
    })
}

/// Whether `pid` exists and is neither a zombie nor dead.
pub fn is_live(pid: i32) -> bool {
    stat(pid).is_some_and(|s| s.is_live())
}

/// Every process visible in `/proc`.
pub fn all() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .collect()
}

/// The processes of group `pgrp`, zombies included.
pub fn group_members(pgrp: i32) -> Vec<ProcStat> {
    all().into_iter().filter(|p| p.pgrp == pgrp).collect()
}

/// This process's pid.
pub fn own_pid() -> i32 {
    i32::try_from(std::process::id()).unwrap_or(i32::MAX)
}

/// Waits (blocking, polling every millisecond, until `timeout`) for a new child
/// of this process that leads its own process group — a process tool's call —
/// and for that group to hold at least `min_members` live processes. Returns
/// the leader's pid (= the group id) and the members seen. Leaders in `known`
/// are skipped, so consecutive calls find consecutive groups.
pub fn find_new_group(
    known: &[i32],
    min_members: usize,
    timeout: Duration,
) -> Option<(i32, Vec<i32>)> {
    let me = own_pid();
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        let procs = all();
        // Every new group this process leads a child of (the runtime's
        // process warden leads one too, alone): the first that is big enough.
        let leaders = procs
            .iter()
            .filter(|p| p.ppid == me && p.pgrp == p.pid && p.is_live() && !known.contains(&p.pid));
        for leader in leaders {
            let members: Vec<i32> = procs
                .iter()
                .filter(|p| p.pgrp == leader.pid && p.is_live())
                .map(|p| p.pid)
                .collect();
            if members.len() >= min_members {
                return Some((leader.pid, members));
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

/// Polls (blocking) from `from` on until every pid in `pids` is gone or a zombie,
/// or until `until`. Returns the moment that was first seen. Polls every 50 µs:
/// the figures it feeds are in milliseconds.
pub fn wait_all_gone(pids: &[i32], from: Instant, until: Instant) -> Option<Instant> {
    if let Some(pause) = from.checked_duration_since(Instant::now()) {
        std::thread::sleep(pause);
    }
    loop {
        let now = Instant::now();
        if pids.iter().all(|&p| !is_live(p)) {
            return Some(now);
        }
        if now >= until {
            return None;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// SIGKILLs `pid` (a negative pid: a whole process group) through `kill(1)`, for
/// the harness's "nothing leaks" clean-up. Best effort.
pub fn kill_hard(pid: i32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// A `kB` field of `/proc/self/status` (`VmRSS`, `VmHWM`), in MiB.
pub fn status_mib(field: &str) -> Option<f64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = text.lines().find(|l| {
        l.strip_prefix(field)
            .is_some_and(|rest| rest.starts_with(':'))
    })?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Current resident set size, in MiB (0 if unreadable).
pub fn rss_mib() -> f64 {
    status_mib("VmRSS").unwrap_or(0.0)
}

/// Peak resident set size (`VmHWM`), in MiB (0 if unreadable).
pub fn peak_rss_mib() -> f64 {
    status_mib("VmHWM").unwrap_or(0.0)
}

/// CPU time (user + system) this process has used so far, all threads
/// included, exited ones too (`getrusage(RUSAGE_SELF)`). Unlike wall time it
/// hardly moves when other processes load the machine.
pub fn cpu_time() -> Duration {
    rusage_cpu(libc::RUSAGE_SELF)
}

/// CPU time (user + system) of this process's children and their
/// descendants that have exited and been waited for (`RUSAGE_CHILDREN`).
pub fn children_cpu_time() -> Duration {
    rusage_cpu(libc::RUSAGE_CHILDREN)
}

fn rusage_cpu(who: libc::c_int) -> Duration {
    // SAFETY: `getrusage` only writes the struct it is given, which is a
    // zero-initialised plain C struct owned by this frame.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(who, &mut usage) != 0 {
            return Duration::ZERO;
        }
        usage
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// The mount a path lives on, from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// File system type (`ext4`, `xfs`, `tmpfs`, `overlay`, ...).
    pub fstype: String,
    /// What is mounted (`/dev/vda`, `tmpfs`, ...).
    pub source: String,
    /// Where it is mounted.
    pub mount_point: String,
}

impl std::fmt::Display for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({} on {})",
            self.fstype, self.source, self.mount_point
        )
    }
}

/// The mount holding `path` (the longest mount point that is a prefix of its
/// canonical form); `None` when the path or `/proc/self/mountinfo` cannot be read.
pub fn mount_of(path: &std::path::Path) -> Option<Mount> {
    let path = std::fs::canonicalize(path).ok()?;
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    parse_mountinfo(&text)
        .filter(|m| path.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.len())
}

/// The mounts of a `mountinfo` text. Per line: id, parent, major:minor, root,
/// mount point, options, optional fields, `-`, type, source, super options.
fn parse_mountinfo(text: &str) -> impl Iterator<Item = Mount> + '_ {
    text.lines().filter_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mount_point = unescape(left.split_whitespace().nth(4)?);
        let mut right = right.split_whitespace();
        let fstype = right.next()?.to_string();
        let source = unescape(right.next().unwrap_or("none"));
        Some(Mount {
            fstype,
            source,
            mount_point,
        })
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let code = bytes
            .get(i + 1..i + 4)
            .filter(|_| bytes[i] == b'\\')
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match code {
            Some(c) => {
                out.push(c);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let s = parse_stat(42, "42 (a (b) c) S 1 42 42 0 -1").unwrap();
        assert_eq!((s.state, s.ppid, s.pgrp), ('S', 1, 42));
        assert!(s.is_live());
        assert!(!parse_stat(1, "1 (x) Z 0 1").unwrap().is_live());
    }

    #[test]
    fn this_process_is_live_and_has_memory() {
        assert!(is_live(own_pid()));
        assert!(rss_mib() > 0.0);
        assert!(peak_rss_mib() >= rss_mib() - 1.0);
        let before = cpu_time();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(cpu_time() > before);
    }

    #[test]
    fn mountinfo_lines_parse() {
        let text = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                    30 22 0:26 / /mnt/my\\040disk rw - tmpfs tmpfs rw,size=10k\n";
        let mounts: Vec<Mount> = parse_mountinfo(text).collect();
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[0].to_string(), "ext4 (/dev/vda on /)");
        assert_eq!(mounts[1].mount_point, "/mnt/my disk");
        assert_eq!(mounts[1].fstype, "tmpfs");
        assert!(mount_of(std::path::Path::new("/")).is_some());
    }
}
