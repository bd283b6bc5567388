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
//! - `agents`: `[agents.NAME]`, started as `agentry run` starts a task.
//! - `resume`: the agents' unfinished runs, resumed as `agentry resume` does.
//! - `stop`: the signals, and the drain they start.

mod agents;
mod error;
mod models;
mod resume;
mod stop;

pub(crate) use error::ServeCliError;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use agentry::{Durability, Runtime};
use agentry_serve::{
    App, DEFAULT_DRAIN_TIMEOUT, DEFAULT_TENANT, ServeError, ServeFile, ServiceConfig, Tokens,
    Webhooks,
};

use crate::args::ServeArgs;
use crate::store::{default_store, open_sqlite};

/// The address served when neither `--addr` nor `[serve] addr` names one.
const DEFAULT_ADDR: &str = "127.0.0.1:8080";

/// The environment variable a token (for the tenant `default`) may come from.
const TOKEN_ENV: &str = "AGENTRY_TOKEN";

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
    match (&tokens, args.no_auth) {
        (None, false) => return Err(ServeCliError::NoToken),
        (None, true) if !addr.ip().is_loopback() => return Err(ServeCliError::NotLoopback(addr)),
        (Some(_), _) | (None, true) => {}
    }
    let store = store_path(args.store.as_ref())?;
    let agents = agents::ServeAgents::load(Arc::clone(&file), &config_path, store.clone())?;
    let runtime = Runtime::with_builtins()
        .and_then(|rt| rt.with_store(open_sqlite(&store)?, Durability::Strict))
        .map_err(ServeCliError::Store)?;
    eprintln!("agentry: serve: runs are stored in {}", store.display());
    let webhooks = webhooks(&file, &config_path, &store)?;
    let app = App::with_config(
        runtime,
        ServiceConfig {
            tokens,
            agents: Some(Arc::new(agents)),
            webhooks: webhooks.clone(),
            retention: file.serve.retention,
            store_file: Some(store.clone()),
            metrics,
            ..ServiceConfig::default()
        },
    );
    let inline = app
        .resume_unfinished()
        .await
        .map_err(ServeCliError::Store)?;
    let named = resume::resume_agents(&app, &file, &store).await;
    if inline.len() + named > 0 {
        eprintln!(
            "agentry: serve: resumed {} unfinished runs",
            inline.len() + named
        );
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
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeCliError::Listen { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ServeCliError::Listen { addr, source })?;
    // Listened for before the address is printed: whoever sends SIGTERM
    // once it knows the address gets a drain.
    let signals = stop::StopSignals::new();
    eprintln!("agentry: serve: listening on http://{bound}");
    let drain_timeout = file.serve.drain_timeout.unwrap_or(DEFAULT_DRAIN_TIMEOUT);
    stop::serve_until_stopped(app, listener, signals, drain_timeout).await;
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
    store: &std::path::Path,
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
    Webhooks::configure(store, &file.serve.webhook_hosts, &secret)
        .map(|hooks| Some(Arc::new(hooks)))
        .map_err(|e| match e {
            agentry_serve::WebhookError::Secret { .. } => fail(key, format!("${var}: {e}")),
            other @ (agentry_serve::WebhookError::Hosts { .. }
            | agentry_serve::WebhookError::Outbox { .. }
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
