#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentry_protocol::accept::AcceptCheck;
use agentry_protocol::budget::BudgetLimits;
use agentry_runtime::config::{DEFAULT_MAX_DENIED, DEFAULT_MAX_STEPS, DEFAULT_PROGRESS_WINDOW};
use agentry_runtime::{ApprovalConfig, Driver, Grants};

use crate::{Compaction, TaskError, TaskSpec};

const GOOD: &str = r#"
goal = "Read numbers.txt, sum the numbers, write the sum to sum.txt"
[budget]
max_steps = 8
max_tool_calls = 6
max_tokens = 100000
max_cost = 0.5
deadline = "30s"
[tools]
grant = ["fs.read", "fs.write", "net.*"]
[[accept]]
file = "sum.txt"
equals = "23"
[[accept]]
command = "test -s sum.txt"
timeout = "10s"
[[accept]]
command = ["test", "-f", "sum.txt"]
[policy]
script = "plan.json"
[progress]
window = 4
max_denied = 2
"#;

fn parse_err(text: &str) -> String {
    match TaskSpec::parse(text, Path::new("/nowhere/t1")) {
        Err(TaskError::Invalid { file, message }) => {
            assert_eq!(file, Path::new("/nowhere/t1/task.toml"));
            message
        }
        other => panic!("expected InvalidTask, got {other:?}"),
    }
}

#[test]
fn a_good_file_parses() {
    let spec = TaskSpec::parse(GOOD, Path::new("/nowhere/t1")).unwrap();
    assert_eq!(
        spec,
        TaskSpec {
            dir: PathBuf::from("/nowhere/t1"),
            task_id: "t1".into(),
            goal: "Read numbers.txt, sum the numbers, write the sum to sum.txt".into(),
            artifacts: Vec::new(),
            limits: BudgetLimits {
                max_retries: None,
                max_ticks: None,
                max_steps: Some(8),
                max_tool_calls: Some(6),
                max_tokens: Some(100_000),
                max_cost_micros: Some(500_000),
                deadline_ms: Some(30_000),
            },
            grants: Grants::new(["fs.read", "fs.write", "net.*"]),
            command_tools: Vec::new(),
            mcp_servers: Vec::new(),
            a2a_agents: Vec::new(),
            accept: vec![
                AcceptCheck::File {
                    file: "sum.txt".into(),
                    equals: Some("23".into()),
                    contains: None,
                },
                AcceptCheck::Command {
                    argv: vec!["sh".into(), "-c".into(), "test -s sum.txt".into()],
                    timeout_ms: 10_000,
                },
                AcceptCheck::Command {
                    argv: vec!["test".into(), "-f".into(), "sum.txt".into()],
                    timeout_ms: 30_000,
                },
            ],
            progress_window: 4,
            max_denied: 2,
            script: Some(PathBuf::from("/nowhere/t1/plan.json")),
            workspace: None,
            approval: ApprovalConfig::default(),
            driver: Driver::Pull,
            tick_every: None,
            model: None,
            base_url: None,
            tree: agentry_runtime::TreeLimits::default(),
            fallback: Vec::new(),
            prompt_cache: true,
            ca_cert: None,
            context_tokens: None,
            result_cap: None,
            compaction: Compaction::Elide,
            child_models: Default::default(),
            observe: Default::default(),
            sandbox: agentry_sandbox::SandboxSpec::default(),
        }
    );
}

#[test]
fn child_models_name_a_model_or_a_script_and_bad_ones_name_the_field() {
    let text = "goal = \"g\"\n[policy.models.big]\nmodel = \"anthropic:claude\"\n[policy.models.small]\nmodel = \"openai:qwen\"\nbase_url = \"http://127.0.0.1:9/v1\"\n[policy.models.fake]\nscript = \"worker.json\"";
    let models = TaskSpec::parse(text, Path::new("/nowhere/t"))
        .unwrap()
        .child_models;
    assert_eq!(
        models.get("small"),
        Some(&crate::ChildModelSpec::Model {
            model: "openai:qwen".into(),
            base_url: Some("http://127.0.0.1:9/v1".into())
        })
    );
    assert_eq!(
        models.get("fake"),
        Some(&crate::ChildModelSpec::Script(
            "/nowhere/t/worker.json".into()
        ))
    );
    assert_eq!(models.len(), 3);
    for (body, field) in [
        (
            "[policy.models.x]\nmodel = \"gemini:y\"",
            "policy.models.x.model",
        ),
        (
            "[policy.models.x]\nscript = \"a.json\"\nmodel = \"openai:m\"",
            "policy.models.x: give model or script",
        ),
        (
            "[policy.models.x]\nscript = \"a.json\"\nbase_url = \"http://h\"",
            "policy.models.x.base_url",
        ),
        ("[policy.models.x]\nname = \"y\"", "policy.models.x"),
        ("[policy.models.x]", "policy.models.x: missing model"),
        ("[policy]\nmodels = 3", "policy.models: expected tables"),
    ] {
        let err = TaskSpec::parse(&format!("goal = \"g\"\n{body}"), Path::new("/x"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(field), "{body}: {err}");
    }
}

#[test]
fn the_tree_table_sets_the_shape_and_the_budget_rule() {
    let text = "goal = \"g\"\n[tree]\nmax_depth = 2\nmax_children = 3\nchild_share = 0.25\nparent_reserve = { steps = 3, tool_calls = 4 }";
    let tree = TaskSpec::parse(text, Path::new("/nowhere/t")).unwrap().tree;
    assert_eq!((tree.max_depth, tree.max_children), (2, 3));
    assert_eq!(tree.child_share.as_per_mille(), 250);
    assert_eq!(
        (tree.parent_reserve.steps, tree.parent_reserve.tool_calls),
        (3, 4)
    );
    let run = TaskSpec::parse(text, Path::new("/nowhere/t"))
        .unwrap()
        .run_config("/tmp/w".into());
    assert_eq!(run.tree, tree);
    // A bare count keeps that many of both.
    let text = "goal = \"g\"\n[tree]\nparent_reserve = 3\nchild_share = 1";
    let tree = TaskSpec::parse(text, Path::new("/nowhere/t")).unwrap().tree;
    assert_eq!(
        (tree.parent_reserve.steps, tree.parent_reserve.tool_calls),
        (3, 3)
    );
    assert_eq!(tree.child_share.as_per_mille(), 1000);
    for (body, field) in [
        ("child_share = 0", "tree.child_share"),
        ("child_share = 1.5", "tree.child_share"),
        ("child_share = \"half\"", "tree.child_share"),
        (
            "parent_reserve = { steps = -1 }",
            "tree.parent_reserve.steps",
        ),
        ("parent_reserve = { step = 1 }", "tree.parent_reserve"),
        ("max_children = 0", "tree.max_children"),
        ("fan_out = 2", "tree"),
    ] {
        let err = TaskSpec::parse(&format!("goal = \"g\"\n[tree]\n{body}"), Path::new("/x"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(field), "{body}: {err}");
    }
}

#[test]
fn fallbacks_and_prompt_cache_parse_and_bad_ones_name_the_field() {
    let text = "goal = \"g\"\n[policy]\nmodel = \"openai:a\"\nprompt_cache = false\n\
                fallback = [\"anthropic:b\", { model = \"openai:c\", base_url = \"http://127.0.0.1:9/v1\" }]";
    let spec = TaskSpec::parse(text, Path::new("/nowhere/m")).unwrap();
    assert_eq!(
        spec.fallback,
        [
            crate::FallbackSpec {
                model: "anthropic:b".into(),
                base_url: None
            },
            crate::FallbackSpec {
                model: "openai:c".into(),
                base_url: Some("http://127.0.0.1:9/v1".into())
            }
        ]
    );
    assert!(!spec.prompt_cache);
    let model = "goal = \"g\"\n[policy]\nmodel = \"openai:a\"\n";
    for (tail, expected) in [
        (
            "fallback = [\"gemini:x\"]",
            "policy.fallback[0]: expected \"openai:MODEL\" or \"anthropic:MODEL\", found \"gemini:x\"",
        ),
        (
            "fallback = \"anthropic:b\"",
            "policy.fallback: expected an array",
        ),
        (
            "fallback = [{ base_url = \"http://x\" }]",
            "policy.fallback[0].model: missing",
        ),
        (
            "fallback = [{ model = \"openai:c\", url = \"http://x\" }]",
            "policy.fallback[0]: unknown field `url`",
        ),
        (
            "fallback = [{ model = \"openai:c\", base_url = \"ftp://x\" }]",
            "policy.fallback[0].base_url: expected an http:// or https:// URL",
        ),
        (
            "prompt_cache = \"no\"",
            "policy.prompt_cache: expected true or false, found \"no\"",
        ),
    ] {
        let message = parse_err(&format!("{model}{tail}"));
        assert!(message.contains(expected), "{tail}: {message}");
    }
    let message = parse_err("goal = \"g\"\n[policy]\nfallback = [\"openai:c\"]");
    assert!(
        message.contains("policy.fallback: applies only with policy.model"),
        "{message}"
    );
}

#[test]
fn a_model_policy_parses_and_bad_ones_name_the_field() {
    let text = "goal = \"g\"\n[policy]\nmodel = \"openai:qwen2.5\"\nbase_url = \"http://127.0.0.1:8080/v1\"";
    let spec = TaskSpec::parse(text, Path::new("/nowhere/m")).unwrap();
    assert_eq!(spec.model.as_deref(), Some("openai:qwen2.5"));
    assert_eq!(spec.base_url.as_deref(), Some("http://127.0.0.1:8080/v1"));
    for (text, field) in [
        ("goal = \"g\"\n[policy]\nmodel = \"gpt\"", "policy.model"),
        (
            "goal = \"g\"\n[policy]\nbase_url = \"http://x\"",
            "policy.base_url",
        ),
        (
            "goal = \"g\"\n[policy]\nmodel = \"openai:m\"\nbase_url = 3",
            "policy.base_url",
        ),
    ] {
        let err = TaskSpec::parse(text, Path::new("/nowhere/m"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(field), "{text}: {err}");
    }
}

/// `[policy] ca_cert` is taken from the task directory and must exist at load;
/// anything else is an error naming the field.
#[test]
fn a_ca_cert_is_resolved_against_the_task_dir_and_must_exist() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("certs")).unwrap();
    std::fs::write(tmp.path().join("certs/ca.pem"), "pem").unwrap();
    let text = "goal = \"g\"\n[policy]\nmodel = \"openai:m\"\nca_cert = \"certs/ca.pem\"";
    let spec = TaskSpec::parse(text, tmp.path()).unwrap();
    assert_eq!(spec.ca_cert, Some(tmp.path().join("certs/ca.pem")));
    assert_eq!(
        TaskSpec::parse("goal = \"g\"", tmp.path()).unwrap().ca_cert,
        None
    );
    for (value, says) in [
        ("\"certs/absent.pem\"", "absent.pem does not exist"),
        ("\"certs\"", "is not a file"),
        ("\"\"", "expected the path of a PEM file"),
        ("3", "expected the path of a PEM file"),
    ] {
        let text = format!("goal = \"g\"\n[policy]\nca_cert = {value}");
        let err = TaskSpec::parse(&text, tmp.path()).unwrap_err().to_string();
        assert!(
            err.contains("policy.ca_cert") && err.contains(says),
            "{value}: {err}"
        );
    }
}

#[test]
fn context_settings_parse_and_bad_ones_name_the_field() {
    let text = "goal = \"g\"\n[policy]\ncontext_tokens = 8192\nresult_cap = 4096\ncompaction = \"summarize\"";
    let spec = TaskSpec::parse(text, Path::new("/nowhere/c")).unwrap();
    assert_eq!(spec.compaction, Compaction::Summarize);
    assert_eq!(spec.context_tokens, Some(8192));
    assert_eq!(spec.result_cap, Some(4096));
    assert_eq!(spec.run_config("/w".into()).result_cap, 4096);
    for (text, field) in [
        (
            "goal = \"g\"\n[policy]\ncontext_tokens = 0",
            "policy.context_tokens",
        ),
        (
            "goal = \"g\"\n[policy]\ncontext_tokens = \"big\"",
            "policy.context_tokens",
        ),
        (
            "goal = \"g\"\n[policy]\nresult_cap = 10",
            "policy.result_cap",
        ),
        (
            "goal = \"g\"\n[policy]\nresult_cap = 99999999999",
            "policy.result_cap",
        ),
    ] {
        let err = TaskSpec::parse(text, Path::new("/nowhere/c"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(field), "{text}: {err}");
    }
}

#[test]
fn approvals_and_drivers_parse() {
    let text = r#"
goal = "watch the queue"
[budget]
max_ticks = 10
[tools]
grant = ["payments.*"]
approve = ["payments.refund"]
approval_timeout = "2m"
[driver]
every = "5s"
"#;
    let spec = TaskSpec::parse(text, Path::new("/nowhere/t3")).unwrap();
    assert_eq!(spec.approval.require, Grants::new(["payments.refund"]));
    assert_eq!(spec.approval.timeout, Some(Duration::from_secs(120)));
    assert_eq!(
        spec.driver,
        Driver::Events,
        "ticks imply an event-driven agent"
    );
    assert_eq!(spec.tick_every, Some(Duration::from_secs(5)));
    assert_eq!(spec.limits.max_ticks, Some(10));
    let config = spec.run_config(PathBuf::from("/tmp"));
    assert_eq!(config.tick_every, Some(Duration::from_secs(5)));

    for (text, field) in [
        ("goal = \"g\"\n[driver]\nmode = \"push\"", "driver.mode"),
        (
            "goal = \"g\"\n[driver]\nmode = \"pull\"\nevery = \"1s\"",
            "driver.every",
        ),
        ("goal = \"g\"\n[tools]\napprove = \"x\"", "tools.approve"),
        (
            "goal = \"g\"\n[tools]\napproval_timeout = 5",
            "tools.approval_timeout",
        ),
    ] {
        let err = TaskSpec::parse(text, Path::new("/nowhere/t4"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(field), "{text}: {err}");
    }
}

#[test]
fn defaults_apply_when_tables_are_absent() {
    let spec = TaskSpec::parse("goal = \"g\"", Path::new("/nowhere/t2")).unwrap();
    assert_eq!(
        spec.limits,
        BudgetLimits {
            max_steps: Some(DEFAULT_MAX_STEPS),
            ..BudgetLimits::default()
        }
    );
    assert_eq!(spec.grants, Grants::new(["fs.read"]));
    assert_eq!(spec.progress_window, DEFAULT_PROGRESS_WINDOW);
    assert_eq!(spec.max_denied, DEFAULT_MAX_DENIED);
    assert_eq!(spec.accept, Vec::new());
    assert_eq!(spec.script, None);
    let spec = TaskSpec::parse("goal = \"g\"\n[tools]\n", Path::new("/nowhere/t2")).unwrap();
    assert_eq!(spec.grants, Grants::new(["fs.read"]));
}

#[test]
fn bad_input_names_the_field() {
    // Size: a table of 22 cases; splitting it would scatter the messages it pins.
    let cases = [
        ("", "goal: missing"),
        ("goal = \"  \"", "goal: expected a non-empty string"),
        (
            "goal = \"g\"\n[budget]\nmax_steps = \"ten\"",
            "budget.max_steps: expected a positive integer, found \"ten\"",
        ),
        (
            "goal = \"g\"\n[budget]\nmax_tool_calls = 0",
            "budget.max_tool_calls: expected a positive integer, found 0",
        ),
        (
            "goal = \"g\"\n[budget]\nmax_cost = -1.0",
            "budget.max_cost: expected a positive number",
        ),
        (
            "goal = \"g\"\n[budget]\ndeadline = \"soon\"",
            "budget.deadline: expected a duration",
        ),
        (
            "goal = \"g\"\n[budget]\ndeadline = 30",
            "budget.deadline: expected a duration string",
        ),
        (
            "goal = \"g\"\n[budget]\nmax_step = 3",
            "budget: unknown field `max_step`",
        ),
        (
            "goal = \"g\"\nbudget = 3",
            "budget: expected a table, found 3",
        ),
        (
            "goal = \"g\"\n[budgte]",
            "unknown field `budgte`, expected one of",
        ),
        (
            "goal = \"g\"\n[tools]\ngrant = \"fs.read\"",
            "tools.grant: expected an array of strings",
        ),
        (
            "goal = \"g\"\n[tools]\ngrant = [\"f*\"]",
            "tools.grant[0]: \"f*\" is not a grant pattern",
        ),
        (
            "goal = \"g\"\n[[accept]]\nfile = \"a\"",
            "accept[0]: a file check needs `equals` or `contains`",
        ),
        (
            "goal = \"g\"\n[[accept]]\nfile = \"a\"\nequals = \"1\"\n[[accept]]\nfile = \"/etc/passwd\"\nequals = \"x\"",
            "accept[1].file: expected a relative path",
        ),
        (
            "goal = \"g\"\n[[accept]]\ncommand = []",
            "accept[0].command: expected a non-empty string",
        ),
        (
            "goal = \"g\"\n[[accept]]\ncommand = \"true\"\ntimeout = \"x\"",
            "accept[0].timeout: expected a duration",
        ),
        (
            "goal = \"g\"\n[[accept]]\nfile = \"a\"\ncommand = \"true\"",
            "accept[0]: has both `file` and `command`",
        ),
        (
            "goal = \"g\"\n[[accept]]\nequals = \"1\"",
            "accept[0]: expected `file` or `command`",
        ),
        (
            "goal = \"g\"\n[[accept]]\nfile = \"a\"\nequal = \"1\"",
            "accept[0]: unknown field `equal`",
        ),
        (
            "goal = \"g\"\n[policy]\nscript = 3",
            "policy.script: expected a relative path, found 3",
        ),
        (
            "goal = \"g\"\n[progress]\nwindow = -1",
            "progress.window: expected a non-negative integer",
        ),
        (
            "goal = \"g\"\n[progress]\nmax_denied = \"3\"",
            "progress.max_denied: expected a non-negative integer",
        ),
        ("goal = \"g\"\n[budget\n", "not valid TOML at line 2"),
    ];
    for (text, want) in cases {
        let message = parse_err(text);
        assert!(
            message.contains(want),
            "{text:?}: got {message:?}, want {want:?}"
        );
    }
}

#[test]
fn load_reports_a_missing_directory_and_file() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let err = TaskSpec::load(&missing).unwrap_err();
    assert!(
        matches!(&err, TaskError::Invalid { file, .. } if file == &missing),
        "{err}"
    );
    let err = TaskSpec::load(tmp.path()).unwrap_err();
    assert!(
        matches!(&err, TaskError::Invalid { file, .. } if file == &tmp.path().join("task.toml")),
        "{err}"
    );
}

fn task_dir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("task.toml"), "goal = \"sum\"").unwrap();
    std::fs::write(tmp.path().join("script.json"), "{\"turns\":[]}").unwrap();
    let ws = tmp.path().join("workspace");
    std::fs::create_dir_all(ws.join("sub/deeper")).unwrap();
    std::fs::write(ws.join("numbers.txt"), "3\n5\n7\n8\n").unwrap();
    std::fs::write(ws.join("sub/deeper/note.txt"), "hi").unwrap();
    tmp
}

#[test]
fn defaults_find_script_and_workspace() {
    let tmp = task_dir();
    let spec = TaskSpec::load(tmp.path()).unwrap();
    assert_eq!(spec.script, Some(tmp.path().join("script.json")));
    assert_eq!(spec.workspace, Some(tmp.path().join("workspace")));
    let config = spec.run_config(PathBuf::from("/w"));
    assert_eq!(config.task_id, spec.task_id);
    assert_eq!(config.workdir, PathBuf::from("/w"));
    assert_eq!(config.limits, spec.limits);
}

#[test]
fn workdir_is_a_fresh_copy_per_call() {
    let tmp = task_dir();
    let spec = TaskSpec::load(tmp.path()).unwrap();
    let a = spec.prepare_workdir(None).unwrap();
    let b = spec.prepare_workdir(None).unwrap();
    assert_ne!(a, b);
    for w in [&a, &b] {
        assert!(w.starts_with(std::fs::canonicalize(std::env::temp_dir()).unwrap()));
        assert_eq!(
            std::fs::read_to_string(w.join("numbers.txt")).unwrap(),
            "3\n5\n7\n8\n"
        );
        assert_eq!(
            std::fs::read_to_string(w.join("sub/deeper/note.txt")).unwrap(),
            "hi"
        );
    }
    std::fs::write(a.join("numbers.txt"), "changed").unwrap();
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("workspace/numbers.txt")).unwrap(),
        "3\n5\n7\n8\n"
    );
    std::fs::remove_dir_all(a).unwrap();
    std::fs::remove_dir_all(b).unwrap();
}

#[test]
fn a_given_workdir_must_be_new_or_empty() {
    let tmp = task_dir();
    let spec = TaskSpec::load(tmp.path()).unwrap();
    let out = tempfile::tempdir().unwrap();
    let fresh = out.path().join("new/run");
    let got = spec.prepare_workdir(Some(&fresh)).unwrap();
    assert_eq!(got, std::fs::canonicalize(&fresh).unwrap());
    assert!(fresh.join("numbers.txt").is_file());
    let err = spec.prepare_workdir(Some(&fresh)).unwrap_err();
    assert!(err.to_string().contains("not empty"), "{err}");
    let empty = out.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    spec.prepare_workdir(Some(&empty)).unwrap();
    let file = out.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let err = spec.prepare_workdir(Some(&file)).unwrap_err();
    assert!(err.to_string().contains("not a directory"), "{err}");
}

#[cfg(unix)]
#[test]
fn symlinks_in_the_workspace_are_refused() {
    let tmp = task_dir();
    std::os::unix::fs::symlink("/etc/passwd", tmp.path().join("workspace/sub/link")).unwrap();
    let spec = TaskSpec::load(tmp.path()).unwrap();
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("run");
    let err = spec.prepare_workdir(Some(&target)).unwrap_err();
    assert!(
        matches!(&err, TaskError::Invalid { file, message }
            if file.ends_with("workspace/sub/link") && message.contains("symbolic links")),
        "{err}"
    );
    // Refused before anything was created.
    assert!(!target.exists());
}
