//! A named model's `max_concurrent` for a whole cluster: the shared part of
//! each [`ModelGate`](agentry_models::ModelGate) when the store is Postgres.
//!
//! Every request in flight to model NAME on any node holds one row of
//! `agentry.model_slots`. A slot is taken in one transaction under an
//! advisory lock on the model's name: the model's live rows are counted and
//! a row inserted when there are fewer than `max_concurrent`; otherwise the
//! request waits, woken by a `NOTIFY` when a slot is given back (and looks
//! again every [`POLL`] in case a notification was missed). A row lives for
//! [`LEASE`] past its last renewal; this process renews the rows it holds
//! every [`RENEW_EVERY`], so the slots of a node that died free themselves
//! after at most [`LEASE`].

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentry::store::pg;
use agentry::store::{Database, Listener, Notice, StoreError};
use agentry_models::{ModelError, SharedInFlight, SharedPass};
use futures::future::BoxFuture;

/// The table: one row per request in flight, anywhere on the database.
const DDL: &str = "CREATE TABLE IF NOT EXISTS agentry.model_slots (
    holder      TEXT PRIMARY KEY,
    model       TEXT NOT NULL,
    node        TEXT NOT NULL,
    taken_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    lease_until TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS model_slots_model ON agentry.model_slots (model)";

/// The channel a given-back slot is announced on (payload: the model).
const FREED: &str = "agentry_model_slot_freed";

/// The first key of the advisory lock a model's count is taken under (the
/// second is the model name's hash): apart from the store's own locks.
const LOCK_CLASS: i32 = 0x6d73_6c74;

/// How long a row counts past its last renewal: a node gone (killed,
/// cut off) holds its slots no longer than this.
pub(crate) const LEASE: Duration = Duration::from_secs(10);

/// How often this process renews the rows it holds.
const RENEW_EVERY: Duration = Duration::from_secs(2);

/// How often a waiting request looks again without a notification.
const POLL: Duration = Duration::from_millis(500);

/// The cluster's shared count of requests in flight, per model.
#[derive(Debug, Clone)]
pub(crate) struct ModelSlots {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    database: Database,
    /// This process (`owner::process_key`): the prefix of its holders.
    node: String,
    next: AtomicU64,
    /// Holders of this process whose slots are held now (renewed).
    held: Mutex<BTreeSet<String>>,
    freed: tokio::sync::Notify,
    /// Kept for the life of the process; listening stops when dropped.
    listener: Mutex<Option<Listener>>,
}

impl ModelSlots {
    /// Connects to the store's database at `url`, makes the table and
    /// starts listening for slots given back and renewing the ones held.
    /// Called from the async runtime (it spawns the renewal).
    pub(crate) async fn connect(url: &str) -> Result<ModelSlots, StoreError> {
        let url = url.to_string();
        // The blocking client connects: off the async workers.
        let database = tokio::task::spawn_blocking(move || {
            let database = Database::connect(&url)?;
            database.ensure(DDL)?;
            Ok::<_, StoreError>(database)
        })
        .await
        .map_err(|e| StoreError::Io {
            path: "model_slots".into(),
            message: e.to_string(),
        })??;
        let inner = Arc::new(Inner {
            database,
            node: agentry::runtime::owner::process_key(),
            next: AtomicU64::new(0),
            held: Mutex::new(BTreeSet::new()),
            freed: tokio::sync::Notify::new(),
            listener: Mutex::new(None),
        });
        let listening = Arc::clone(&inner);
        let listener = tokio::task::spawn_blocking(move || {
            let wake = Arc::clone(&listening);
            listening
                .database
                .listen(FREED, move |notice| match notice {
                    Notice::Payload(_) | Notice::Reconnected => wake.freed.notify_waiters(),
                })
        })
        .await;
        match listener {
            Ok(Ok(listener)) => *inner.lock_listener() = Some(listener),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "given-back model slots are not listened for; waiting requests look every {POLL:?}");
            }
            Err(e) => {
                tracing::warn!(error = %e, "given-back model slots are not listened for; waiting requests look every {POLL:?}");
            }
        }
        tokio::spawn(renew(Arc::clone(&inner)));
        Ok(ModelSlots { inner })
    }
}

impl SharedInFlight for ModelSlots {
    fn acquire(&self, model: &str, max: u32) -> BoxFuture<'static, Result<SharedPass, ModelError>> {
        let inner = Arc::clone(&self.inner);
        let model = model.to_string();
        Box::pin(async move {
            let n = inner.next.fetch_add(1, Ordering::Relaxed);
            let holder = format!("{}/{n}", inner.node);
            // Renewed from now on; forgotten (and its row deleted) if this
            // wait is given up after the row went in.
            inner.lock_held().insert(holder.clone());
            let mut taking = Taking {
                inner: Arc::clone(&inner),
                holder: Some(holder.clone()),
                model: model.clone(),
            };
            loop {
                let freed = inner.freed.notified();
                tokio::pin!(freed);
                // A slot given back while the count is read still wakes us.
                freed.as_mut().enable();
                if inner.take(&model, &holder, max).await? {
                    let release = taking.disarm();
                    return Ok(SharedPass::new(release));
                }
                tokio::select! {
                    () = &mut freed => {}
                    () = tokio::time::sleep(POLL) => {}
                }
            }
        })
    }
}

impl Inner {
    /// Takes a slot of `model` for `holder` if fewer than `max` are held.
    async fn take(
        self: &Arc<Self>,
        model: &str,
        holder: &str,
        max: u32,
    ) -> Result<bool, ModelError> {
        let this = Arc::clone(self);
        let (model, holder) = (model.to_string(), holder.to_string());
        let failed = |reason: String| ModelError::SharedGate {
            model: model.clone(),
            reason,
        };
        let (lease, node) = (LEASE.as_secs_f64(), self.node.clone());
        let (name, holder) = (model.clone(), holder);
        let taken = tokio::task::spawn_blocking(move || {
            let model = name;
            this.database.transaction(move |tx| {
                tx.execute(
                    "SELECT pg_advisory_xact_lock($1, hashtext($2))",
                    &[&LOCK_CLASS, &model],
                )?;
                // Run again after a lost commit that landed: already held.
                let mine = tx.query_opt(
                    "SELECT 1 FROM agentry.model_slots WHERE holder = $1",
                    &[&holder],
                )?;
                if mine.is_some() {
                    return Ok(true);
                }
                let live: i64 = tx
                    .query_one(
                        "SELECT count(*) FROM agentry.model_slots
                         WHERE model = $1 AND lease_until >= now()",
                        &[&model],
                    )?
                    .get(0);
                if live >= i64::from(max) {
                    return Ok(false);
                }
                tx.execute(
                    "DELETE FROM agentry.model_slots WHERE model = $1 AND lease_until < now()",
                    &[&model],
                )?;
                tx.execute(
                    "INSERT INTO agentry.model_slots (holder, model, node, lease_until)
                     VALUES ($1, $2, $3, now() + make_interval(secs => $4))",
                    &[&holder, &model, &node, &lease],
                )?;
                Ok(true)
            })
        })
        .await;
        match taken {
            Ok(Ok(taken)) => Ok(taken),
            Ok(Err(e)) => Err(failed(e.to_string())),
            Err(e) => Err(failed(e.to_string())),
        }
    }

    /// Gives `holder`'s slot back and tells the other nodes.
    fn give_back(self: &Arc<Self>, holder: String, model: String) {
        self.lock_held().remove(&holder);
        let this = Arc::clone(self);
        let released = move || {
            let given = this.database.transaction(move |tx| {
                tx.execute(
                    "DELETE FROM agentry.model_slots WHERE holder = $1",
                    &[&holder],
                )?;
                tx.execute("SELECT pg_notify($1, $2)", &[&FREED, &model])?;
                Ok(())
            });
            if let Err(e) = given {
                tracing::warn!(error = %e, "a model slot is not given back; it lapses after {LEASE:?}");
            }
        };
        // Dropped wherever the request ended; the runtime may be gone then.
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => drop(handle.spawn_blocking(released)),
            Err(_) => released(),
        }
    }

    fn lock_held(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_listener(&self) -> std::sync::MutexGuard<'_, Option<Listener>> {
        self.listener.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A slot being waited for: given back if the wait is dropped (the row may
/// have gone in just before).
struct Taking {
    inner: Arc<Inner>,
    holder: Option<String>,
    model: String,
}

impl Taking {
    /// The slot was taken: what gives it back, for the pass.
    fn disarm(&mut self) -> impl FnOnce() + Send + Sync + 'static {
        let (inner, holder, model) = (
            Arc::clone(&self.inner),
            self.holder.take(),
            self.model.clone(),
        );
        move || {
            if let Some(holder) = holder {
                inner.give_back(holder, model);
            }
        }
    }
}

impl Drop for Taking {
    fn drop(&mut self) {
        if let Some(holder) = self.holder.take() {
            self.inner.give_back(holder, self.model.clone());
        }
    }
}

/// Every [`RENEW_EVERY`], extends the lease of the slots this process holds.
async fn renew(inner: Arc<Inner>) {
    let lease = LEASE.as_secs_f64();
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        let held: Vec<String> = inner.lock_held().iter().cloned().collect();
        if held.is_empty() {
            continue;
        }
        let this = Arc::clone(&inner);
        let renewed = tokio::task::spawn_blocking(move || {
            this.database
                .transaction(move |tx: &mut pg::Transaction<'_>| {
                    tx.execute(
                        "UPDATE agentry.model_slots
                     SET lease_until = now() + make_interval(secs => $2)
                     WHERE holder = ANY($1)",
                        &[&held, &lease],
                    )
                })
        })
        .await;
        match renewed {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "the model slots held here are not renewed"),
            Err(e) => tracing::warn!(error = %e, "the model slots held here are not renewed"),
        }
    }
}

/// The server's gates: on a Postgres store, each named model's
/// `max_concurrent` is shared with every node on the database.
pub(crate) async fn gates(
    file: &agentry_serve::ServeFile,
    store: &std::path::Path,
) -> Result<super::models::Gates, super::ServeCliError> {
    let shared = match store.to_str() {
        Some(url)
            if crate::store::is_url(store)
                && file.models.values().any(|m| m.max_concurrent.is_some()) =>
        {
            let slots = ModelSlots::connect(url)
                .await
                .map_err(|e| super::ServeCliError::Store(e.into()))?;
            Some(Arc::new(slots) as Arc<dyn SharedInFlight>)
        }
        Some(_) | None => None,
    };
    Ok(super::models::Gates::of(file, shared))
}
