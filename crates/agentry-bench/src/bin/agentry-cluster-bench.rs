//! `agentry-cluster-bench`: `agentry serve` nodes on one Postgres database,
//! measured from outside over HTTP, as a user's service would see them.
//!
//! - **throughput**: R inline runs (three durable `fs.write` steps each)
//!   created round-robin on 1, 2 and 3 nodes, runs finished per second;
//!   each figure also as a ratio to one node's, measured in the same run.
//! - **created-to-visible**: a run created on one node, then asked of another
//!   until it answers: the latency a client sees across nodes (p50, p95).
//! - **take-over**: M event-driven runs asleep on one node, the node
//!   SIGKILLed; the time until every run is held by the other node (read
//!   from its log), against the lease it had to wait out.
//!
//! The nodes are the `agentry` binary next to this one (`--agentry` names
//! another); each measurement gets a fresh database of a private server
//! started from Debian's `postgresql` package (`agentry-test-postgres`).

use std::process::Command;
use std::time::{Duration, Instant};

use agentry_bench::outside::{Res, Served, agentry_binary, ensure, percentile};

use clap::Parser;
use serde_json::{Value, json};

#[derive(Debug, Parser)]
#[command(name = "agentry-cluster-bench", about)]
struct Args {
    /// The `agentry` binary the nodes run (default: next to this one).
    #[arg(long)]
    agentry: Option<std::path::PathBuf>,
    /// Runs per throughput measurement.
    #[arg(long, default_value_t = 300)]
    runs: usize,
    /// Runs taken over.
    #[arg(long, default_value_t = 50)]
    takeover_runs: usize,
    /// The nodes' lease.
    #[arg(long, default_value = "2s")]
    lease: String,
    /// Runs asked of another node for the created-to-visible latency.
    #[arg(long, default_value_t = 50)]
    probes: usize,
}

/// Bound on any wait.
const WAIT: Duration = Duration::from_secs(300);

/// One `agentry serve` node; killed when dropped.
struct Node(Served);

impl Node {
    fn start(agentry: &std::path::Path, url: &str, lease: &str) -> Res<Node> {
        let mut command = Command::new(agentry);
        command
            .args([
                "serve",
                "--no-auth",
                "--addr",
                "127.0.0.1:0",
                "--store",
                url,
            ])
            .args(["--lease", lease]);
        Ok(Node(Served::spawn(command, WAIT)?))
    }

    fn base(&self) -> &str {
        &self.0.base
    }

    /// When the log last said `text` and how often it said it.
    fn said(&self, text: &str) -> (usize, Option<Instant>) {
        let log = self.0.log.lock().unwrap_or_else(|e| e.into_inner());
        let hits: Vec<Instant> = log
            .iter()
            .filter(|(_, line)| line.contains(text))
            .map(|(at, _)| *at)
            .collect();
        (hits.len(), hits.last().copied())
    }
}

struct Client(reqwest::Client);

impl Client {
    async fn create(&self, node: &Node, body: &Value) -> Res<String> {
        let reply: Value = self
            .0
            .post(format!("{}/runs", node.base()))
            .json(body)
            .send()
            .await?
            .json()
            .await?;
        Ok(reply["run_id"]
            .as_str()
            .ok_or_else(|| format!("no run id: {reply}"))?
            .to_string())
    }

    /// `GET /runs/{id}`'s view, when it answers 200.
    async fn view(&self, node: &Node, id: &str) -> Res<Option<Value>> {
        let response = self
            .0
            .get(format!("{}/runs/{id}", node.base()))
            .send()
            .await?;
        if response.status().as_u16() != 200 {
            return Ok(None);
        }
        Ok(Some(response.json().await?))
    }

    /// `GET /runs` with `query`: how many runs it lists.
    async fn listed(&self, node: &Node, query: &str) -> Res<usize> {
        let listed: Value = self
            .0
            .get(format!("{}/runs?{query}", node.base()))
            .send()
            .await?
            .json()
            .await?;
        Ok(listed["runs"].as_array().map_or(0, Vec::len))
    }
}

fn three_writes() -> Value {
    let turns: Vec<Value> = (1..=3)
        .map(|i| {
            json!({"tool_calls": [{"id": format!("w{i}"), "name": "fs.write",
                   "arguments": {"path": format!("f{i}.txt"), "content": "x"}}]})
        })
        .chain([json!({"final": "done"})])
        .collect();
    json!({"goal": "write three files", "tools": {"grant": ["fs.write"]},
           "progress": {"window": 0}, "script": {"turns": turns}})
}

fn sleeper() -> Value {
    json!({"goal": "wait for messages", "driver": {"mode": "events"},
           "budget": {"max_steps": 100, "deadline": "600s"}, "progress": {"window": 0},
           "script": {"turns": [{"final": "ok"}], "then": "repeat_last"}})
}

/// Runs finished per second on `k` nodes.
async fn throughput(
    client: &Client,
    agentry: &std::path::Path,
    url: &str,
    args: &Args,
    k: usize,
) -> Res<f64> {
    let nodes = (0..k)
        .map(|_| Node::start(agentry, url, &args.lease))
        .collect::<Res<Vec<Node>>>()?;
    let body = three_writes();
    let started = Instant::now();
    for i in 0..args.runs {
        client.create(&nodes[i % k], &body).await?;
    }
    while client.listed(&nodes[0], "status=running&limit=500").await? > 0 {
        ensure(started.elapsed() < WAIT, || {
            format!("runs still running after {WAIT:?}")
        })?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(args.runs as f64 / started.elapsed().as_secs_f64())
}

/// Milliseconds from a run's creation on one node to another node answering for it.
async fn created_to_visible(
    client: &Client,
    agentry: &std::path::Path,
    url: &str,
    args: &Args,
) -> Res<Vec<f64>> {
    let a = Node::start(agentry, url, &args.lease)?;
    let b = Node::start(agentry, url, &args.lease)?;
    let mut took = Vec::new();
    for _ in 0..args.probes {
        let started = Instant::now();
        let id = client.create(&a, &sleeper()).await?;
        while !client
            .view(&b, &id)
            .await?
            .is_some_and(|view| view["status"].is_string())
        {
            ensure(started.elapsed() < WAIT, || {
                format!("run {id} never visible")
            })?;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        took.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(took)
}

/// Seconds from a node's SIGKILL until its last run was taken over.
async fn take_over(client: &Client, agentry: &std::path::Path, url: &str, args: &Args) -> Res<f64> {
    // The heir starts once the runs are in: none is placed on it.
    let doomed = Node::start(agentry, url, &args.lease)?;
    for _ in 0..args.takeover_runs {
        client.create(&doomed, &sleeper()).await?;
    }
    let heir = Node::start(agentry, url, &args.lease)?;
    // Every run stored before the kill.
    let started = Instant::now();
    while client.listed(&doomed, "limit=500").await? < args.takeover_runs {
        ensure(started.elapsed() < WAIT, || "the runs never started".into())?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let killed = Instant::now();
    drop(doomed);
    loop {
        let (count, last) = heir.said("took over run");
        if count >= args.takeover_runs {
            return Ok(last.map_or(0.0, |at| (at - killed).as_secs_f64()));
        }
        ensure(killed.elapsed() < WAIT, || {
            format!("{count} of {} taken over", args.takeover_runs)
        })?;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Res<()> {
    let args = Args::parse();
    let agentry = agentry_binary(args.agentry.as_deref())?;
    let server = agentry_test_postgres::PgServer::start();
    agentry_tls::install_crypto_provider();
    let client = Client(
        reqwest::Client::builder()
            .no_proxy()
            .timeout(WAIT)
            .build()?,
    );
    let lease = humantime::parse_duration(&args.lease)?;
    let mut per_nodes = Vec::new();
    for k in 1..=3 {
        let rate = throughput(&client, &agentry, &server.database(), &args, k).await?;
        per_nodes.push(rate);
        println!(
            "{}",
            json!({"figure": "cluster_throughput", "nodes": k, "runs": args.runs,
                   "runs_per_s": rate, "vs_one_node": rate / per_nodes[0]})
        );
    }
    let mut took = created_to_visible(&client, &agentry, &server.database(), &args).await?;
    took.sort_by(f64::total_cmp);
    println!(
        "{}",
        json!({"figure": "created_to_visible_across_nodes_ms", "probes": took.len(),
               "p50": percentile(&took, 50.0), "p95": percentile(&took, 95.0)})
    );
    let seconds = take_over(&client, &agentry, &server.database(), &args).await?;
    println!(
        "{}",
        json!({"figure": "take_over_s", "runs": args.takeover_runs,
               "lease_s": lease.as_secs_f64(), "took_s": seconds,
               "beyond_lease_s": seconds - lease.as_secs_f64()})
    );
    Ok(())
}
