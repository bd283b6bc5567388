//! What one call holds on its agent: how it reaches it ([`Reach`]) and the
//! remote task it has under way ([`RemoteTask`]), cancelled unless it settled.

use std::sync::{Arc, Mutex};

use crate::card::discover;
use crate::client::{A2aClient, A2aOptions};
use crate::error::A2aError;

/// The remote task a call has under way: cancelled with `CancelTask` unless
/// it settled, also when the call's future is dropped.
pub(crate) struct RemoteTask {
    pub(crate) client: Arc<A2aClient>,
    pub(crate) id: Mutex<Option<String>>,
}

/// How the tool reaches its agent.
#[derive(Debug)]
pub(crate) enum Reach {
    /// A client made already (the card read by the embedder).
    Ready(Arc<A2aClient>),
    /// The agent's card, read at the first call that needs it.
    Card {
        url: String,
        options: A2aOptions,
        found: tokio::sync::OnceCell<Arc<A2aClient>>,
    },
}

impl Reach {
    pub(crate) async fn client(&self) -> Result<Arc<A2aClient>, A2aError> {
        match self {
            Reach::Ready(client) => Ok(Arc::clone(client)),
            Reach::Card {
                url,
                options,
                found,
            } => found
                .get_or_try_init(|| async {
                    let options = options.expanded(url, |var| std::env::var(var).ok())?;
                    discover(url, &options).await.map(|d| Arc::new(d.client))
                })
                .await
                .map(Arc::clone),
        }
    }
}

impl RemoteTask {
    pub(crate) fn set(&self, id: &str) {
        if let Ok(mut slot) = self.id.lock() {
            *slot = Some(id.to_string());
        }
    }

    pub(crate) fn settle(&self) {
        if let Ok(mut slot) = self.id.lock() {
            *slot = None;
        }
    }

    /// Sends `CancelTask` for the task under way, if any, from a task of its
    /// own (so a dropped call still sends it): the task's id, and the handle
    /// that waits for the request.
    pub(crate) fn cancel(&self) -> Option<(String, tokio::task::JoinHandle<()>)> {
        let id = self.id.lock().ok()?.take()?;
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let client = self.client.clone();
        let task_id = id.clone();
        let sent = runtime.spawn(async move {
            match client.cancel_task(&task_id).await {
                Ok(task) => {
                    tracing::debug!(task_id = %task_id, state = task.status.state.as_str(), "remote A2A task cancelled")
                }
                Err(e) => {
                    tracing::warn!(task_id = %task_id, error = %e, "CancelTask of a remote A2A task failed")
                }
            }
        });
        Some((id, sent))
    }
}

impl Drop for RemoteTask {
    fn drop(&mut self) {
        // A dropped call: the request goes on without it.
        drop(self.cancel());
    }
}
