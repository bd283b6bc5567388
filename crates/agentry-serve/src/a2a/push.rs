//! Push notifications: a task's configs (inline in SendMessage's
//! `configuration.taskPushNotificationConfig`, or by
//! Create/Get/List/DeleteTaskPushNotificationConfig), each followed by a
//! task of its own that POSTs every StreamResponse (no JSON-RPC envelope)
//! to its URL with `X-A2A-Notification-Token` and the config's
//! `Authorization`, until the task is terminal. They go as serve's
//! webhooks go: a URL must name a host of `[serve] webhook_hosts`, each
//! POST is signed per Standard Webhooks with the webhook secret
//! (`webhook-id` `a2a_<task>_<config>_<n>`, the same on every attempt of
//! notification n) through the webhooks' client (no redirects). An attempt
//! that fails is tried again three times (after 0.5 s, 2 s, 5 s), in order.
//! Configs live in the process: a restart forgets them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};

use super::super::table::App;
use super::super::webhooks::Webhooks;
use super::follow::{Follower, Until};
use super::task::TaskRef;
use super::wire::{RpcError, id_param};

/// Waits before the second, third and fourth attempt.
const RETRIES: [Duration; 3] = [
    Duration::from_millis(500),
    Duration::from_secs(2),
    Duration::from_secs(5),
];

/// A task's push notification config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PushConfig {
    id: String,
    task_id: String,
    url: String,
    token: Option<String>,
    /// `Authorization: SCHEME CREDENTIALS`.
    authorization: Option<String>,
}

impl PushConfig {
    /// `TaskPushNotificationConfig`.
    pub(super) fn json(&self) -> Value {
        let mut config = json!({"id": self.id, "taskId": self.task_id, "url": self.url});
        if let Some(token) = &self.token {
            config["token"] = json!(token);
        }
        if let Some((scheme, credentials)) = self
            .authorization
            .as_deref()
            .and_then(|a| a.split_once(' '))
        {
            config["authentication"] = json!({"scheme": scheme, "credentials": credentials});
        }
        config
    }
}

/// Every task's configs, by task id.
#[derive(Debug, Default)]
pub(super) struct Pushes {
    configs: Mutex<HashMap<String, Vec<PushConfig>>>,
}

impl Pushes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<PushConfig>>> {
        // Configs are replaced whole: a poisoned map is consistent.
        self.configs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, task_id: &str, id: &str) -> Option<PushConfig> {
        self.lock()
            .get(task_id)
            .and_then(|configs| configs.iter().find(|c| c.id == id).cloned())
    }

    /// The configs of a task.
    pub(super) fn list(&self, task_id: &str) -> Vec<PushConfig> {
        self.lock().get(task_id).cloned().unwrap_or_default()
    }

    /// The config `id` of a task (-32001 when it has none of that id).
    pub(super) fn find(&self, task_id: &str, id: &str) -> Result<PushConfig, RpcError> {
        self.get(task_id, id).ok_or_else(|| {
            RpcError::invalid_params(format!("task {task_id} has no push config {id:?}"))
        })
    }

    /// Removes config `id` of a task; its follower stops at its next event.
    pub(super) fn delete(&self, task_id: &str, id: &str) -> bool {
        let mut configs = self.lock();
        let Some(list) = configs.get_mut(task_id) else {
            return false;
        };
        let before = list.len();
        list.retain(|c| c.id != id);
        before != list.len()
    }

    /// Adds (or replaces) a config of `task`, checked, and starts following
    /// the task for it. The task as it is now is read before this returns:
    /// it is told even if the config is deleted right after.
    pub(super) async fn create(
        self: &Arc<Self>,
        task: TaskRef<'_>,
        params: &Value,
        min_inputs: u64,
    ) -> Result<PushConfig, RpcError> {
        let Some(hooks) = task.app.config.webhooks.clone() else {
            return Err(RpcError::push_not_supported());
        };
        let config = parse(task.app, task.id, params)?;
        {
            let mut configs = self.lock();
            let list = configs.entry(task.id.to_string()).or_default();
            list.retain(|c| c.id != config.id);
            list.push(config.clone());
        }
        let until = Until {
            input_required: false,
            min_inputs,
        };
        let mut follower = Follower::new(task, until);
        let first = follower.next().await.unwrap_or_default();
        let sender = Sender {
            hooks,
            config: config.clone(),
            sent: 0,
        };
        tokio::spawn(Arc::clone(self).push(follower, first, sender));
        Ok(config)
    }

    async fn push(self: Arc<Self>, mut follower: Follower, first: Vec<Value>, mut sender: Sender) {
        for value in first {
            sender.deliver(&value).await;
        }
        let config = sender.config.clone();
        while let Some(told) = follower.next().await {
            for value in told {
                // A deleted (or replaced) config is told nothing more.
                if self.get(&config.task_id, &config.id).as_ref() != Some(&config) {
                    return;
                }
                sender.deliver(&value).await;
            }
        }
    }
}

/// One config's notifications, in order.
struct Sender {
    hooks: Arc<Webhooks>,
    config: PushConfig,
    /// Notifications sent so far (the next one's number).
    sent: u64,
}

impl Sender {
    /// POSTs one StreamResponse, tried again on failure.
    async fn deliver(&mut self, value: &Value) {
        let config = &self.config;
        let id = format!("a2a_{}_{}_{}", config.task_id, config.id, self.sent);
        self.sent += 1;
        let body = value.to_string();
        for attempt in 0..=RETRIES.len() {
            if !self.attempt(&id, &body, attempt).await {
                return;
            }
            if let Some(pause) = RETRIES.get(attempt) {
                tokio::time::sleep(*pause).await;
            }
        }
    }

    /// One attempt: whether to try again.
    async fn attempt(&self, id: &str, body: &str, attempt: usize) -> bool {
        let config = &self.config;
        let mut request = self.hooks.signed_post(&config.url, id, body);
        if let Some(token) = &config.token {
            request = request.header("X-A2A-Notification-Token", token);
        }
        if let Some(authorization) = &config.authorization {
            request = request.header("authorization", authorization);
        }
        match request.send().await {
            Ok(response) if response.status().is_success() => false,
            Ok(response) => {
                tracing::warn!(task_id = %config.task_id, status = %response.status(), attempt, "push notification refused");
                true
            }
            Err(error) => {
                tracing::warn!(task_id = %config.task_id, %error, attempt, "push notification failed");
                true
            }
        }
    }
}

/// A `TaskPushNotificationConfig` of task `task_id`, its URL checked
/// against `[serve] webhook_hosts`.
pub(super) fn parse(app: &App, task_id: &str, params: &Value) -> Result<PushConfig, RpcError> {
    let Some(hooks) = &app.config.webhooks else {
        return Err(RpcError::push_not_supported());
    };
    let url = id_param(params, "url")?;
    let url = hooks
        .check(&url)
        .map_err(|e| RpcError::invalid_params(format!("url: {}", e.message())))?;
    let text = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let authorization = match params.get("authentication") {
        Some(auth) => {
            let scheme = text(auth.get("scheme")).ok_or_else(|| {
                RpcError::invalid_params("authentication.scheme: Field is required.")
            })?;
            Some(format!(
                "{scheme} {}",
                text(auth.get("credentials")).unwrap_or_default()
            ))
        }
        None => None,
    };
    Ok(PushConfig {
        id: text(params.get("id")).unwrap_or_else(|| task_id.to_string()),
        task_id: task_id.to_string(),
        url,
        token: text(params.get("token")),
        authorization,
    })
}
