//! `agentry-protocols-bench`: what speaking A2A and AG-UI costs a user of
//! `agentry serve`, against the native routes of the same service, measured
//! from outside over HTTP in the same process and the same minutes.
//!
//! - **task round trip**: one task of a one-step agent, from the request to
//!   its answer: A2A `SendMessage` (one request, answered when the task is
//!   COMPLETED) against the native `POST /runs` + `GET /runs/{id}/events` to
//!   `run_stopped`; sequential (latency, p50 and p95) and `--concurrency`
//!   at once (tasks per second). Rounds alternate so drift hits both.
//! - **stream**: a stopped run of `--steps` `fs.write` steps read whole as
//!   the native stream and as `?format=ag-ui`: time and bytes, as ratios.
//!
//! The service is the `agentry` binary next to this one (`--agentry` names
//! another), on 127.0.0.1 with a SQLite store in a temporary directory.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agentry_bench::outside::{Res, Served, agentry_binary, ensure, percentile};

use clap::Parser;
use serde_json::{Value, json};

#[derive(Debug, Parser)]
#[command(name = "agentry-protocols-bench", about)]
struct Args {
    /// The `agentry` binary the service runs (default: next to this one).
    #[arg(long)]
    agentry: Option<std::path::PathBuf>,
    /// Tasks per round and protocol.
    #[arg(long, default_value_t = 40)]
    tasks: usize,
    /// Rounds (each: native, then A2A, sequential and concurrent).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Tasks in flight at once in the concurrent measurement.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Steps of the run whose stream is read.
    #[arg(long, default_value_t = 200)]
    steps: usize,
    /// Reads of that stream per format.
    #[arg(long, default_value_t = 10)]
    reads: usize,
}

/// Bound on any wait.
const WAIT: Duration = Duration::from_secs(120);

/// The `agentry serve` under test (killed when dropped) and its directory.
struct Service {
    served: Served,
    _dir: tempfile::TempDir,
}

/// A task directory `tasks/NAME` with its goal, extra task.toml lines and script.
fn task(root: &Path, name: &str, toml: &str, script: &Value) -> Res<()> {
    let dir = root.join("tasks").join(name);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("task.toml"), toml)?;
    std::fs::write(dir.join("script.json"), script.to_string())?;
    Ok(())
}

impl Service {
    /// Agents `echo` (one step, answers "echoed"; published over A2A) and
    /// `writer` (`steps` `fs.write` steps, then done).
    fn start(agentry: &Path, steps: usize) -> Res<Service> {
        let dir = tempfile::tempdir()?;
        let root = dir.path();
        let budget = format!(
            "[budget]\nmax_steps = {}\ndeadline = \"600s\"\n[progress]\nwindow = 0\n",
            steps + 10
        );
        task(
            root,
            "echo",
            &format!("goal = \"echo the user's message\"\n{budget}"),
            &json!({"turns": [{"final": "echoed"}]}),
        )?;
        let turns: Vec<Value> = (0..steps)
            .map(|i| {
                json!({"tool_calls": [{"id": format!("w{i}"), "name": "fs.write",
                       "arguments": {"path": format!("f{}.txt", i % 8), "content": format!("line {i}\n")}}]})
            })
            .chain([json!({"final": "written"})])
            .collect();
        task(
            root,
            "writer",
            &format!("goal = \"write\"\n{budget}[tools]\ngrant = [\"fs.write\"]\n"),
            &json!({ "turns": turns }),
        )?;
        std::fs::write(
            root.join("serve.toml"),
            "[agents.echo]\ntask = \"tasks/echo\"\na2a = true\n\
             [agents.writer]\ntask = \"tasks/writer\"\n",
        )?;
        let mut command = Command::new(agentry);
        command
            .arg("serve")
            .arg("--config")
            .arg(root.join("serve.toml"))
            .arg("--store")
            .arg(root.join("runs.db"))
            .args(["--no-auth", "--addr", "127.0.0.1:0"]);
        Ok(Service {
            served: Served::spawn(command, WAIT)?,
            _dir: dir,
        })
    }
}

#[derive(Clone)]
struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    /// A native run of `agent`, followed on its event stream to `run_stopped`.
    async fn native_task(&self, agent: &str) -> Res<String> {
        let reply: Value = self
            .http
            .post(format!("{}/runs", self.base))
            .json(&json!({"agent": agent, "input": "hi"}))
            .send()
            .await?
            .json()
            .await?;
        let id = reply["run_id"]
            .as_str()
            .ok_or_else(|| format!("no run id: {reply}"))?
            .to_string();
        let read = self.read_stream(&id, "").await?;
        ensure(read.contains("event: run_stopped"), || {
            format!("run {id}'s stream ended before run_stopped")
        })?;
        Ok(id)
    }

    /// One A2A `SendMessage` to `echo`, answered when the task is COMPLETED.
    async fn a2a_task(&self, n: usize) -> Res<()> {
        let reply: Value = self
            .http
            .post(format!("{}/a2a/echo", self.base))
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": n, "method": "SendMessage",
                "params": {"message": {"messageId": format!("m{n}"), "role": "ROLE_USER",
                                       "parts": [{"text": "hi"}]}}}))
            .send()
            .await?
            .json()
            .await?;
        let state = &reply["result"]["task"]["status"]["state"];
        ensure(state == "TASK_STATE_COMPLETED", || {
            format!("SendMessage answered {reply}")
        })
    }

    /// Run `id`'s whole event stream (`query` appended), until the service ends it.
    async fn read_stream(&self, id: &str, query: &str) -> Res<String> {
        let mut response = self
            .http
            .get(format!("{}/runs/{id}/events{query}", self.base))
            .send()
            .await?;
        ensure(response.status().as_u16() == 200, || {
            format!("GET /runs/{id}/events{query}: {}", response.status())
        })?;
        let mut text = String::new();
        while let Some(chunk) = tokio::time::timeout(WAIT, response.chunk()).await?? {
            text.push_str(std::str::from_utf8(&chunk)?);
            // The native stream of a stopped run ends with `run_stopped`; the
            // service may keep the connection for keep-alives after it.
            if query.is_empty() && text.contains("event: run_stopped") {
                break;
            }
        }
        Ok(text)
    }
}

/// Which protocol a measurement speaks.
#[derive(Debug, Clone, Copy)]
enum Protocol {
    Native,
    A2a,
}

impl Protocol {
    async fn task(self, client: &Client, n: usize) -> Res<()> {
        match self {
            Protocol::Native => client.native_task("echo").await.map(drop),
            Protocol::A2a => client.a2a_task(n).await,
        }
    }
}

/// Milliseconds per task, one after another.
async fn sequential(client: &Client, protocol: Protocol, tasks: usize) -> Res<Vec<f64>> {
    let mut took = Vec::with_capacity(tasks);
    for n in 0..tasks {
        let started = Instant::now();
        protocol.task(client, n).await?;
        took.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(took)
}

/// Tasks per second with `concurrency` in flight.
async fn concurrent(
    client: &Client,
    protocol: Protocol,
    tasks: usize,
    concurrency: usize,
) -> Res<f64> {
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..concurrency {
        let client = client.clone();
        let mine: Vec<usize> = (w..tasks).step_by(concurrency).collect();
        workers.spawn(async move {
            for n in mine {
                protocol.task(&client, n).await.map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(())
        });
    }
    while let Some(done) = workers.join_next().await {
        done?.map_err(|e| format!("{protocol:?}: {e}"))?;
    }
    Ok(tasks as f64 / started.elapsed().as_secs_f64())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    percentile(&values, 50.0)
}

/// The task round trip, native and A2A, alternating rounds.
async fn round_trips(client: &Client, args: &Args) -> Res<()> {
    let mut latency = [Vec::new(), Vec::new()];
    let mut rate = [Vec::new(), Vec::new()];
    // One task of each first: connections and the agent's first start.
    Protocol::Native.task(client, 0).await?;
    Protocol::A2a.task(client, 0).await?;
    for _ in 0..args.rounds {
        for (i, protocol) in [Protocol::Native, Protocol::A2a].into_iter().enumerate() {
            latency[i].extend(sequential(client, protocol, args.tasks).await?);
            rate[i].push(concurrent(client, protocol, args.tasks, args.concurrency).await?);
        }
    }
    for l in &mut latency {
        l.sort_by(f64::total_cmp);
    }
    let [native, a2a] = &latency;
    println!(
        "{}",
        json!({"figure": "task_round_trip_ms", "tasks": native.len(),
               "native_p50": percentile(native, 50.0), "native_p95": percentile(native, 95.0),
               "a2a_p50": percentile(a2a, 50.0), "a2a_p95": percentile(a2a, 95.0),
               "a2a_vs_native_p50": percentile(a2a, 50.0) / percentile(native, 50.0)})
    );
    let [native, a2a] = rate;
    let (native, a2a) = (median(native), median(a2a));
    println!(
        "{}",
        json!({"figure": "tasks_per_s", "concurrency": args.concurrency,
               "native": native, "a2a": a2a, "a2a_vs_native": a2a / native})
    );
    Ok(())
}

/// A stopped run of `args.steps` steps read whole in both formats.
async fn streams(client: &Client, args: &Args) -> Res<()> {
    let id = client.native_task("writer").await?;
    let mut took = [Vec::new(), Vec::new()];
    let mut bytes = [0, 0];
    for _ in 0..args.reads {
        for (i, query) in ["", "?format=ag-ui"].into_iter().enumerate() {
            let started = Instant::now();
            let text = client.read_stream(&id, query).await?;
            took[i].push(started.elapsed().as_secs_f64() * 1000.0);
            bytes[i] = text.len();
        }
    }
    let [native, agui] = took;
    let (native, agui) = (median(native), median(agui));
    println!(
        "{}",
        json!({"figure": "stopped_run_stream", "steps": args.steps, "reads": args.reads,
               "native_ms": native, "ag_ui_ms": agui, "ag_ui_vs_native_ms": agui / native,
               "native_bytes": bytes[0], "ag_ui_bytes": bytes[1],
               "ag_ui_vs_native_bytes": bytes[1] as f64 / bytes[0] as f64})
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Res<()> {
    let args = Args::parse();
    let agentry = agentry_binary(args.agentry.as_deref())?;
    agentry_tls::install_crypto_provider();
    let service = Service::start(&agentry, args.steps)?;
    let client = Client {
        http: reqwest::Client::builder()
            .no_proxy()
            .timeout(WAIT)
            .build()?,
        base: service.served.base.clone(),
    };
    round_trips(&client, &args).await?;
    streams(&client, &args).await?;
    Ok(())
}
