//! `cargo ...` lines of the docs: not run here (CI runs the builds, tests and
//! examples), but every package, example and path they name must exist.

use std::collections::BTreeSet;
use std::path::Path;

/// The workspace's package and example names, from `cargo metadata`.
pub(super) struct Workspace {
    packages: BTreeSet<String>,
    examples: BTreeSet<String>,
}

impl Workspace {
    pub(super) fn read(root: &Path) -> Workspace {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = std::process::Command::new(cargo)
            .args([
                "metadata",
                "--no-deps",
                "--format-version",
                "1",
                "--offline",
            ])
            .current_dir(root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cargo metadata: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut workspace = Workspace {
            packages: BTreeSet::new(),
            examples: BTreeSet::new(),
        };
        for package in meta["packages"].as_array().unwrap() {
            workspace
                .packages
                .insert(package["name"].as_str().unwrap().to_string());
            for target in package["targets"].as_array().unwrap() {
                if target["kind"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k == "example")
                {
                    let name = target["name"].as_str().unwrap();
                    workspace.examples.insert(name.to_string());
                }
            }
        }
        workspace
    }

    /// Checks a `cargo` command's names. For `cargo run -p agentry-cli --
    /// ARGS` it returns ARGS: an `agentry` command, to be parsed and run as one.
    pub(super) fn check(
        &self,
        root: &Path,
        words: &[String],
    ) -> Result<Option<Vec<String>>, String> {
        let (flags, rest) = match words.iter().position(|w| w == "--") {
            Some(i) => (&words[1..i], Some(&words[i + 1..])),
            None => (&words[1..], None),
        };
        let value_of = |i: usize| {
            flags
                .get(i + 1)
                .ok_or_else(|| format!("{} needs a value", flags[i]))
        };
        let mut packages = Vec::new();
        for (i, flag) in flags.iter().enumerate() {
            match flag.as_str() {
                "-p" | "--package" => packages.push(value_of(i)?.clone()),
                "--example" if !self.examples.contains(value_of(i)?) => {
                    return Err(format!("no example {:?} in the workspace", value_of(i)?));
                }
                "--path" if !root.join(value_of(i)?).join("Cargo.toml").is_file() => {
                    return Err(format!("--path {}: no Cargo.toml there", value_of(i)?));
                }
                _ => {}
            }
        }
        if let Some(unknown) = packages.iter().find(|p| !self.packages.contains(*p)) {
            return Err(format!("no package {unknown:?} in the workspace"));
        }
        let runs_the_cli = flags.first().is_some_and(|c| c == "run") && packages == ["agentry-cli"];
        Ok(rest.filter(|_| runs_the_cli).map(<[String]>::to_vec))
    }
}
