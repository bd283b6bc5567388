//! The warden: tool processes do not outlive the host process.
//!
//! A small `sh` child, started before the first process tool's spawn and
//! kept for the life of the host process, reads lines on a pipe from it
//! ([`Line`]), up to three for each spawn:
//!
//! - `m <spawn id>` *before* the spawn: its processes will carry this mark
//!   (`AGENTRY_SPAWN_ID`, in their environment);
//! - `+ <pgid> <leader start> <spawn id>` once its group exists (it takes the
//!   mark's place), or `u <spawn id>` if the spawn failed (the mark is
//!   forgotten);
//! - `- <pgid>` once the group is gone: the group and its mark are forgotten,
//!   so the list holds only what runs and does not grow over a long-lived
//!   host.
//!
//! However the host process dies — SIGKILL, a panic, the OOM killer — the
//! kernel closes its end of the pipe; the warden reads EOF and kills what is
//! still listed: each group whose leader is still the process that was
//! started (same start time, so a reused pid is never signalled), then every
//! process carrying a listed mark, which finds those that left their group
//! and a spawn whose group was not listed yet (the host died between the
//! spawn and its `+` line).
//!
//! Why the mark before the spawn is enough. The write end of the pipe is
//! close-on-exec: a child the host forked holds a copy of it until it execs
//! its program (or dies), and the warden reads EOF only once every copy is
//! closed. So at EOF every spawned program has exec'd, and its
//! `/proc/<pid>/environ` shows its mark. Under the kernel sandbox the
//! spawned leader and the namespace's init never exec: they close every
//! inherited descriptor instead (`agentry-sandbox`, `child/`), carry the
//! host's environment, not the mark, and die with the command the mark
//! finds (init kills the rest of the PID namespace). The warden reads the
//! sandboxed command's `environ` from the host's `/proc` as the host's user:
//! the command's user namespace is the host user's own, so the same user may.
//!
//! Why a process and not `PR_SET_PDEATHSIG`: that signal reaches only the
//! leader (not its children in the group), and it fires when the *thread*
//! that spawned the leader exits, which for a tokio blocking thread is after
//! 10 s idle. The warden runs in its own process group, ignoring the
//! terminal's INT/HUP/QUIT/TSTP, so a Ctrl-C to the host does not take it down
//! first.
//!
//! Limits (see ARCHITECTURE.md, "Fencing"): Linux `/proc` is needed for the
//! start-time check and the mark search (without it nothing is killed); a
//! process that both left its group and cleared its environment is not
//! found; a warden killed on purpose is restarted at the next line but does
//! not know the groups listed before. A resume fences the run's recorded
//! groups itself in any case (`fence`).

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, PoisonError};

/// The warden's program (POSIX `sh`; `kill` is a built-in, `grep` from PATH).
/// A list entry is `<pgid>:<leader start>:<spawn id>`, `-:-:<spawn id>` for
/// a mark whose group is not known yet.
const SCRIPT: &str = r#"trap '' INT HUP QUIT TSTP
set -f
list=
while read -r op g s m; do
  new=
  case $op in
    m) list="$list -:-:$g" ;;
    u) for e in $list; do [ "$e" = "-:-:$g" ] || new="$new $e"; done
       list=$new ;;
    +) for e in $list; do [ "$e" = "-:-:$m" ] || new="$new $e"; done
       list="$new $g:$s:$m" ;;
    -) for e in $list; do
         case $e in "$g":*) ;; *) new="$new $e" ;; esac
       done
       list=$new ;;
  esac
done
marks=
for e in $list; do
  g=${e%%:*}; r=${e#*:}; s=${r%%:*}; m=${r#*:}
  if [ "$s" != - ] && read -r st 2>/dev/null < "/proc/$g/stat"; then
    set -- ${st##*\)}
    [ "${20}" = "$s" ] && kill -KILL -- "-$g" 2>/dev/null
  fi
  marks="$marks -e AGENTRY_SPAWN_ID=$m"
done
set +f
if [ -n "$marks" ] && [ -d /proc/self ]; then
  for f in $(grep -lzxF $marks /proc/[0-9]*/environ 2>/dev/null); do
    p=${f#/proc/}; kill -KILL "${p%/environ}" 2>/dev/null
  done
fi
"#;

/// The name the warden runs under (its `$0`), to be found in a process list.
pub const WARDEN_NAME: &str = "agentry-warden";

/// One line of the warden's protocol (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Line<'a> {
    /// A spawn is about to start; its processes will carry `spawn_id`.
    Mark { spawn_id: &'a str },
    /// That spawn failed: nothing carries the mark.
    Unmark { spawn_id: &'a str },
    /// The spawn's group started.
    Group {
        pgid: i32,
        leader_start: Option<u64>,
        spawn_id: &'a str,
    },
    /// The group is gone (its id may be reused now).
    Gone { pgid: i32 },
}

impl std::fmt::Display for Line<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Line::Mark { spawn_id } => writeln!(f, "m {spawn_id}"),
            Line::Unmark { spawn_id } => writeln!(f, "u {spawn_id}"),
            Line::Group {
                pgid,
                leader_start: Some(start),
                spawn_id,
            } => writeln!(f, "+ {pgid} {start} {spawn_id}"),
            Line::Group {
                pgid,
                leader_start: None,
                spawn_id,
            } => writeln!(f, "+ {pgid} - {spawn_id}"),
            Line::Gone { pgid } => writeln!(f, "- {pgid}"),
        }
    }
}

/// Where a spawn's lines go: this host process's warden ([`HOST_WARDEN`]),
/// or in tests a warden of their own.
pub(super) trait Tell: Sync + std::fmt::Debug {
    fn tell(&self, line: Line<'_>);
}

/// This host process's warden, started at the first line told.
#[derive(Debug)]
pub(super) struct HostWarden;

/// The one [`HostWarden`] every spawn of this process is listed with.
pub(super) static HOST_WARDEN: HostWarden = HostWarden;

impl Tell for HostWarden {
    fn tell(&self, line: Line<'_>) {
        tell(&line.to_string());
    }
}

/// A spawn's mark, told to the warden before the spawn. Dropped without
/// [`Listing::group_started`] (the spawn failed), it tells the warden to
/// forget the mark.
pub(super) struct Listing<'a> {
    warden: &'a dyn Tell,
    spawn_id: &'a str,
    grouped: bool,
}

impl<'a> Listing<'a> {
    /// Tells `warden` the mark of a spawn about to start.
    pub(super) fn before_spawn(warden: &'a dyn Tell, spawn_id: &'a str) -> Self {
        warden.tell(Line::Mark { spawn_id });
        Listing {
            warden,
            spawn_id,
            grouped: false,
        }
    }

    /// The spawn's group exists: the warden lists it in the mark's place.
    pub(super) fn group_started(mut self, pgid: i32, leader_start: Option<u64>) {
        self.grouped = true;
        self.warden.tell(Line::Group {
            pgid,
            leader_start,
            spawn_id: self.spawn_id,
        });
    }
}

impl Drop for Listing<'_> {
    fn drop(&mut self) {
        if !self.grouped {
            self.warden.tell(Line::Unmark {
                spawn_id: self.spawn_id,
            });
        }
    }
}

/// A running warden and the host's end of its pipe.
#[derive(Debug)]
pub(super) struct Warden {
    child: Child,
    pipe: ChildStdin,
}

impl Warden {
    /// Starts a warden (`None`, logged, if `sh` cannot be started).
    pub(super) fn start() -> Option<Warden> {
        let spawned = Command::new("sh")
            .args(["-c", SCRIPT, WARDEN_NAME])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        match spawned {
            Ok(mut child) => {
                let pipe = child.stdin.take()?;
                Some(Warden { child, pipe })
            }
            Err(e) => {
                tracing::warn!(error = %e, "the process warden could not be started: tool processes may outlive this process if it dies");
                None
            }
        }
    }

    /// Sends one line.
    pub(super) fn send(&mut self, line: &str) -> std::io::Result<()> {
        self.pipe.write_all(line.as_bytes())
    }

    /// Closes the pipe the way the host's death does, and returns the
    /// warden's process (it exits after its kill pass).
    #[cfg(test)]
    pub(super) fn close(self) -> Child {
        drop(self.pipe);
        self.child
    }
}

static WARDEN: Mutex<Option<Warden>> = Mutex::new(None);

/// The warden's pid, once one runs (for tests that take it down first).
pub fn warden_pid() -> Option<u32> {
    lock().as_ref().map(|w| w.child.id())
}

fn lock() -> std::sync::MutexGuard<'static, Option<Warden>> {
    WARDEN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sends one line, starting the warden first if none runs (or the last one
/// died: its list is lost, which is logged).
fn tell(line: &str) {
    let mut warden = lock();
    for _ in 0..2 {
        if warden.is_none() {
            *warden = Warden::start();
        }
        let Some(w) = warden.as_mut() else { return };
        if w.send(line).is_ok() {
            return;
        }
        tracing::warn!(
            pid = w.child.id(),
            "the process warden died; starting another (it does not know the groups started before)"
        );
        let _ = w.child.try_wait();
        *warden = None;
    }
}

/// When process `pid` started (clock ticks since boot), where `/proc` says.
pub(super) fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields after its
    // last ')' are state (3) ... starttime (22).
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19)?.parse().ok()
}
