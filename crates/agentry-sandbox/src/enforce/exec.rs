//! The command's `execve` data, read off the `Command` std will fork for.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::process::Command;

use crate::plan::ExecPlan;

/// Where a program without a `/` is looked for when the command sets no
/// `PATH` (glibc's `execvp` default, which std would use).
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";

/// What std would exec for `command`: its program looked up on the `PATH`
/// it sets, its arguments, and exactly the variables it sets (the sandbox's
/// callers clear the inherited environment first). `None` when one of them
/// holds a NUL byte (std refuses those too).
pub(super) fn plan(command: &Command) -> Option<ExecPlan> {
    let program = command.get_program();
    let mut args = vec![cstring(program)?];
    for arg in command.get_args() {
        args.push(cstring(arg)?);
    }
    let mut env = Vec::new();
    let mut path = None;
    for (key, value) in command.get_envs() {
        let Some(value) = value else { continue };
        if key == "PATH" {
            path = Some(value);
        }
        let mut line = key.as_bytes().to_vec();
        line.push(b'=');
        line.extend_from_slice(value.as_bytes());
        env.push(CString::new(line).ok()?);
    }
    let candidates = candidates(program, path.map_or(DEFAULT_PATH, OsStr::as_bytes))?;
    Some(ExecPlan::new(candidates, args, env))
}

/// `execvp`'s search: the program itself when it holds a `/`, else each
/// `PATH` entry joined with it (an empty entry is the working directory).
fn candidates(program: &OsStr, path: &[u8]) -> Option<Vec<CString>> {
    let name = program.as_bytes();
    if name.contains(&b'/') {
        return Some(vec![CString::new(name).ok()?]);
    }
    path.split(|byte| *byte == b':')
        .map(|dir| {
            let mut full = dir.to_vec();
            if !full.is_empty() {
                full.push(b'/');
            }
            full.extend_from_slice(name);
            CString::new(full).ok()
        })
        .collect()
}

fn cstring(text: &OsStr) -> Option<CString> {
    CString::new(text.as_bytes()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(list: &[CString]) -> Vec<&str> {
        list.iter().map(|c| c.to_str().unwrap_or("?")).collect()
    }

    #[test]
    fn a_bare_name_is_looked_up_on_the_commands_path() {
        let mut command = Command::new("tool");
        command
            .env_clear()
            .env("PATH", "/opt/bin::/usr/bin")
            .arg("x");
        let plan = plan(&command).expect("a plan");
        assert_eq!(
            texts(&plan.candidates),
            ["/opt/bin/tool", "tool", "/usr/bin/tool"]
        );
        assert_eq!(plan.argv.len(), 3, "tool, x and the null");
        assert!(plan.argv[2].is_null() && plan.envp[1].is_null());
    }

    #[test]
    fn a_path_is_tried_alone_and_no_path_set_means_the_default() {
        let mut command = Command::new("./run.sh");
        command.env_clear();
        let plan = plan(&command).expect("a plan");
        assert_eq!(texts(&plan.candidates), ["./run.sh"]);
        let bare = plan_of("sh");
        assert_eq!(texts(&bare.candidates), ["/bin/sh", "/usr/bin/sh"]);
    }

    fn plan_of(program: &str) -> ExecPlan {
        let mut command = Command::new(program);
        command.env_clear().env("A", "1");
        plan(&command).expect("a plan")
    }
}
