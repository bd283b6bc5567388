//! `agentry serve`: the HTTP service (`agentry-serve`) as a product. It reads
//! serve.toml (the operator's agents and models, the tokens file), refuses
//! to start without a token unless `--no-auth` (then loopback only), puts
//! every run in the store (the default one unless `--store`), resumes the
//! store's unfinished runs, and serves until ctrl-c or SIGTERM, then
//! drains: running steps finish, every run is left in the store for the
//! next start.
//!
//! - `error`: `ServeCliError`, why it does not serve.
//! - `models`: a `[models.NAME]` chain as a run's policy.
//! - `model_slots`: on Postgres, `max_concurrent` for the whole cluster.
//! - `agents`: `[agents.NAME]`, started as `agentry run` starts a task.
//! - `resume`: the agents' unfinished runs, resumed as `agentry resume` does.
//! - `stop`: the signals, and the drain they start.
//! - `cluster`: a node of a cluster on a Postgres store (leases, take-over,
//!   requests for other nodes' runs).

mod agents;
mod cluster;
mod error;
mod model_slots;
mod models;
mod resume;
mod stop;

pub(crate) use error::ServeCliError;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use agentry::{Durability, Runtime};
use agentry_serve::{
    App, DEFAULT_DRAIN_TIMEOUT, DEFAULT_MAX_QUEUED, DEFAULT_TENANT, QueuePlace, RunLimits,
    ServeError, ServeFile, ServiceConfig, TenantLimits, Tokens, Webhooks, micros_of,
};

use crate::args::ServeArgs;
use crate::store::{default_store, open_store};

/// The address served when neither `--addr` nor `[serve] addr` names one.
const DEFAULT_ADDR: &str = "127.0.0.1:8080";

/// The environment variable a token (for the tenant `default`) may come from.
const TOKEN_ENV: &str = "AGENTRY_TOKEN";

/// `[serve]`'s and `[tenants.*]`'s limits; the queue is kept beside the
/// store's tables (`place`).
fn run_limits(file: &ServeFile, place: QueuePlace) -> RunLimits {
    let count = |n: Option<u32>| n.map(|n| n as usize);
    RunLimits {
        max_running: count(file.serve.max_running),
        max_queued: count(file.serve.max_queued).unwrap_or(DEFAULT_MAX_QUEUED),
        tenants: file
            .tenants
            .iter()
            .map(|(name, entry)| {
                let limits = TenantLimits {
                    max_running: count(entry.max_running),
                    max_cost_per_day_micros: entry.max_cost_per_day.and_then(micros_of),
                };
                (name.clone(), limits)
            })
            .collect(),
        queue_file: Some(place),
    }
}

/// Where the service keeps its own tables (the queue, the day's spend, the
/// webhook outbox): the store's SQLite file, or a Postgres store's database
/// (one connection of their own), shared with every service on it.
fn service_tables(store: &std::path::Path) -> Result<QueuePlace, ServeCliError> {
    if !crate::store::is_url(store) {
        return Ok(QueuePlace::File(store.to_path_buf()));
    }
    let url = store.to_str().unwrap_or_default();
    let database =
        agentry::store::Database::connect(url).map_err(|e| ServeCliError::Store(e.into()))?;
    Ok(QueuePlace::Database(Arc::new(database)))
}

/// The store as messages name it: a Postgres URL without its password.
fn shown_store(runtime: &Runtime, store: &std::path::Path) -> String {
    match runtime.store() {
        Some(opened) if crate::store::is_url(store) => opened.location(),
        Some(_) | None => store.display().to_string(),
    }
}

/// Every `[tenants.NAME]` names a tenant a token stands for: a misspelt
/// name would leave the real tenant without its limits.
fn check_tenants(
    file: &ServeFile,
    tokens: Option<&Tokens>,
    config: &std::path::Path,
) -> Result<(), ServeError> {
    let known = tokens.map(Tokens::tenant_names).unwrap_or_default();
    match file.tenants.keys().find(|name| !known.contains(name)) {
        Some(name) => Err(ServeError::Config {
            path: config.to_path_buf(),
            key: format!("tenants.{name}"),
            message: format!(
                "no token stands for tenant {name:?} (tenants: {}); name a tenant of [auth] tokens_file, or \"default\" for AGENTRY_TOKEN",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ),
        }),
        None => Ok(()),
    }
}

/// Serves until ctrl-c or SIGTERM; `GET /metrics` serves `metrics` (counted
/// by the process's subscriber) when given.
pub(crate) async fn serve(
    args: ServeArgs,
    metrics: Option<agentry::metrics::Metrics>,
) -> Result<(), ServeCliError> {
    let (file, config_path) = match &args.config {
        Some(path) => (ServeFile::load(path)?, path.clone()),
        None => (ServeFile::default(), PathBuf::from("serve.toml")),
    };
    let file = Arc::new(file);
    let tokens = tokens(&file)?;
    let addr = args.addr.or(file.serve.addr).unwrap_or_else(|| {
        DEFAULT_ADDR
            .parse()
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 8080)))
    });
    check_auth(tokens.as_ref(), args.no_auth, addr)?;
    check_tenants(&file, tokens.as_ref(), &config_path)?;
    let store = store_path(args.store.as_ref())?;
    let gates = Arc::new(model_slots::gates(&file, &store).await?);
    let agents = agents::ServeAgents::load(
        Arc::clone(&file),
        &config_path,
        store.clone(),
        Arc::clone(&gates),
    )?;
    // A node of a cluster runs its runs in lease mode.
    let lease = args
        .lease
        .or(crate::store::is_url(&store).then_some(cluster::DEFAULT_LEASE));
    let agents = agents.with_lease(lease);
    let runtime = runtime_on(&store, lease)?;
    eprintln!(
        "agentry: serve: runs are stored in {}",
        shown_store(&runtime, &store)
    );
    let tables = service_tables(&store)?;
    let webhooks = webhooks(&file, &config_path, &tables)?;
    let limits = guard_limits(&file, &config_path)?;
    let app = App::with_config(
        runtime,
        ServiceConfig {
            tokens,
            agents: Some(Arc::new(agents)),
            webhooks: webhooks.clone(),
            retention: file.serve.retention,
            store_file: Some(store.clone()),
            workdir_root: file.serve.workdir_root.clone(),
            metrics,
            run_limits: run_limits(&file, tables),
            limits,
            ..ServiceConfig::default()
        },
    );
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeCliError::Listen { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ServeCliError::Listen { addr, source })?;
    let resumer = resume::Resumer {
        file: Arc::clone(&file),
        gates: Arc::clone(&gates),
        store: store.clone(),
        lease,
    };
    let node = join_or_resume(&app, resumer, bound, webhooks).await?;
    // Listened for before the address is printed: whoever sends SIGTERM
    // once it knows the address gets a drain.
    let signals = stop::StopSignals::new();
    eprintln!("agentry: serve: listening on http://{bound}");
    let drain_timeout = file.serve.drain_timeout.unwrap_or(DEFAULT_DRAIN_TIMEOUT);
    stop::serve_until_stopped(app, listener, signals, drain_timeout).await;
    if let Some(node) = node {
        let _ = tokio::task::spawn_blocking(move || node.leave()).await;
    }
    Ok(())
}

/// `[serve]`'s guard limits. Checked when serve.toml was parsed; the error
/// names the key anyway.
fn guard_limits(
    file: &ServeFile,
    config: &std::path::Path,
) -> Result<agentry_serve::Limits, ServeError> {
    file.serve
        .limit_settings()
        .limits()
        .map_err(|e| ServeError::Config {
            path: config.to_path_buf(),
            key: "serve.max_streams".into(),
            message: e.to_string(),
        })
}

/// No token needs `--no-auth`, and `--no-auth` a loopback address.
fn check_auth(
    tokens: Option<&Tokens>,
    no_auth: bool,
    addr: SocketAddr,
) -> Result<(), ServeCliError> {
    match (tokens, no_auth) {
        (None, false) => Err(ServeCliError::NoToken),
        (None, true) if !addr.ip().is_loopback() => Err(ServeCliError::NotLoopback(addr)),
        (Some(_), _) | (None, true) => Ok(()),
    }
}

/// The service's runtime, its runs in `store`, in lease mode with `lease`.
fn runtime_on(
    store: &std::path::Path,
    lease: Option<std::time::Duration>,
) -> Result<Runtime, ServeCliError> {
    let runtime = Runtime::with_builtins()
        .and_then(|rt| rt.with_store(open_store(store)?, Durability::Strict))
        .map_err(ServeCliError::Store)?;
    Ok(match lease {
        Some(lease) => runtime.with_lease(lease),
        None => runtime,
    })
}

/// A node of a cluster (a Postgres store in lease mode) joins it: it resumes
/// no run at start, it takes over the runs of nodes that are gone, as every
/// node does all along. Any other service resumes its store's unfinished runs.
async fn join_or_resume(
    app: &App,
    resumer: resume::Resumer,
    bound: SocketAddr,
    webhooks: Option<Arc<Webhooks>>,
) -> Result<Option<Arc<cluster::Node>>, ServeCliError> {
    let url =
        crate::store::is_url(&resumer.store).then(|| resumer.store.to_string_lossy().into_owned());
    match (url, resumer.lease) {
        (Some(url), Some(lease)) => {
            let node = cluster::join(app, &url, format!("http://{bound}"), lease, resumer)
                .await
                .map_err(|e| ServeCliError::Store(e.into()))?;
            bring_back_service(app, webhooks).await?;
            Ok(Some(node))
        }
        (Some(_) | None, _) => {
            bring_back(app, &resumer, webhooks).await?;
            Ok(None)
        }
    }
}

/// What the store holds for this service, brought back before it listens:
/// the unfinished runs resumed, the queue behind them, the webhooks of runs
/// that stopped while no server held them; then the deliverer and the
/// retention sweep, running until the process ends.
async fn bring_back(
    app: &App,
    resumer: &resume::Resumer,
    webhooks: Option<Arc<Webhooks>>,
) -> Result<(), ServeCliError> {
    let inline = app
        .resume_unfinished()
        .await
        .map_err(ServeCliError::Store)?;
    let named = resume::resume_agents(app, resumer).await;
    if inline.len() + named > 0 {
        eprintln!(
            "agentry: serve: resumed {} unfinished runs",
            inline.len() + named
        );
    }
    bring_back_service(app, webhooks).await
}

/// The queue behind the resumed runs, the webhooks of runs that stopped
/// while no server held them; then the deliverer and the retention sweep.
async fn bring_back_service(
    app: &App,
    webhooks: Option<Arc<Webhooks>>,
) -> Result<(), ServeCliError> {
    // After the resumed runs took their slots: the queue waits behind them.
    let queued = app.restore_queue().await?;
    if queued > 0 {
        eprintln!("agentry: serve: {queued} queued runs wait for a slot");
    }
    if let Some(hooks) = webhooks {
        match app.ready_stopped_webhooks().await {
            Ok(0) => {}
            Ok(n) => {
                eprintln!("agentry: serve: {n} webhooks of runs stopped before this start are due")
            }
            Err(e) => eprintln!("agentry: serve: {e}"),
        }
        tokio::spawn(hooks.deliver(std::future::pending()));
    }
    tokio::spawn(app.clone().keep_retention(std::future::pending()));
    Ok(())
}

/// The tokens of `[auth] tokens_file` and `AGENTRY_TOKEN`; `None` when
/// neither gives one.
fn tokens(file: &ServeFile) -> Result<Option<Tokens>, ServeError> {
    let mut tokens = match &file.auth.tokens_file {
        Some(path) => Tokens::load(path)?,
        None => Tokens::default(),
    };
    if let Some(token) = std::env::var_os(TOKEN_ENV) {
        let token = token
            .into_string()
            .map_err(|_| ServeError::TokenEnv("not UTF-8"))?;
        tokens = tokens.with_token(DEFAULT_TENANT, &token)?;
    }
    Ok((!tokens.is_empty()).then_some(tokens))
}

/// `[serve] webhook_hosts` with the secret of `webhook_secret_env`: `None`
/// without hosts; an error naming the key when the secret is missing or
/// unusable (its value is never shown).
fn webhooks(
    file: &ServeFile,
    config: &std::path::Path,
    tables: &QueuePlace,
) -> Result<Option<Arc<Webhooks>>, ServeCliError> {
    if file.serve.webhook_hosts.is_empty() {
        return Ok(None);
    }
    let fail = |key: &str, message: String| ServeCliError::Webhooks {
        config: config.to_path_buf(),
        key: key.to_string(),
        message,
    };
    let key = "serve.webhook_secret_env";
    let Some(var) = &file.serve.webhook_secret_env else {
        return Err(fail(
            key,
            "must name the variable holding the signing secret".into(),
        ));
    };
    let secret = std::env::var(var)
        .map_err(|_| fail(key, format!("${var} is not set (or not UTF-8): the webhooks' signing secret (whsec_ and base64) comes from it")))?;
    let hosts = &file.serve.webhook_hosts;
    match tables {
        QueuePlace::File(store) => Webhooks::configure(store, hosts, &secret),
        QueuePlace::Database(database) => {
            Webhooks::configure_in_database(Arc::clone(database), hosts, &secret)
        }
    }
    .map(|hooks| Some(Arc::new(hooks)))
    .map_err(|e| match e {
        agentry_serve::WebhookError::Secret { .. } => fail(key, format!("${var}: {e}")),
        other @ (agentry_serve::WebhookError::Hosts { .. }
        | agentry_serve::WebhookError::Outbox { .. }
        | agentry_serve::WebhookError::OutboxDatabase { .. }
        | agentry_serve::WebhookError::Client { .. }) => {
            fail("serve.webhook_hosts", other.to_string())
        }
    })
}

/// `--store`, else the default store (its directory made, private).
fn store_path(store: Option<&PathBuf>) -> Result<PathBuf, ServeCliError> {
    let path = match store {
        Some(path) => path.clone(),
        None => default_store().map_err(ServeCliError::Store)?,
    };
    if crate::store::is_url(&path) {
        return Ok(path);
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| {
            ServeCliError::Store(
                agentry::store::StoreError::Open {
                    path: path.display().to_string(),
                    message: e.to_string(),
                }
                .into(),
            )
        })?;
    }
    Ok(std::path::absolute(&path).unwrap_or(path))
}
