//! The warden: tool processes do not outlive the host process.
//!
//! A small `sh` child, started with the first process tool's spawn and kept
//! for the life of the host process, reads lines on a pipe from it:
//! `+ <pgid> <leader start> <spawn id>` as a call's group starts, `- <pgid>`
//! once the group is gone. However the host process dies — SIGKILL, a panic,
//! the OOM killer — the kernel closes its end of the pipe; the warden reads
//! EOF and kills what is still listed: each group whose leader is still the
//! process that was started (same start time, so a reused pid is never
//! signalled), then every process carrying a listed spawn mark
//! (`AGENTRY_SPAWN_ID`, in its environment), which finds those that left
//! their group.
//!
//! Why a process and not `PR_SET_PDEATHSIG`: that signal reaches only the
//! leader (not its children in the group), and it fires when the *thread*
//! that spawned the leader exits, which for a tokio blocking thread is after
//! 10 s idle. The warden runs in its own process group, ignoring the
//! terminal's INT/HUP/QUIT/TSTP, so a Ctrl-C to the host does not take it down
//! first. The write end of the pipe is close-on-exec, so no tool process holds
//! it open.
//!
//! Limits (see ARCHITECTURE.md, "Fencing"): Linux `/proc` is needed for the
//! start-time check and the mark search (elsewhere only the groups are
//! killed, unchecked); a process that both left its group and cleared its
//! environment is not found; a warden killed on purpose is restarted at the
//! next spawn but does not know the groups listed before. A resume fences the
//! run's recorded groups itself in any case (`fence`).

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, PoisonError};

/// The warden's program (POSIX `sh`; `kill` is a built-in, `grep` from PATH).
const SCRIPT: &str = r#"trap '' INT HUP QUIT TSTP
set -f
list=
while read -r op g s m; do
  case $op in
    +) list="$list $g:$s:$m" ;;
    -) new=
       for e in $list; do
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

struct Warden {
    child: Child,
    pipe: ChildStdin,
}

static WARDEN: Mutex<Option<Warden>> = Mutex::new(None);

/// Lists a call's group with the warden.
pub(super) fn watch(pgid: i32, leader_start: Option<u64>, spawn_id: &str) {
    let start = leader_start.map_or_else(|| "-".to_string(), |s| s.to_string());
    tell(&format!("+ {pgid} {start} {spawn_id}\n"));
}

/// The group is gone: the warden forgets it (its id may be reused now).
pub(super) fn forget(pgid: i32) {
    tell(&format!("- {pgid}\n"));
}

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
            *warden = start();
        }
        let Some(w) = warden.as_mut() else { return };
        if w.pipe.write_all(line.as_bytes()).is_ok() {
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

fn start() -> Option<Warden> {
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

/// When process `pid` started (clock ticks since boot), where `/proc` says.
pub(super) fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields after its
    // last ')' are state (3) ... starttime (22).
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19)?.parse().ok()
}
