//! [`McpServers`]: several servers started together, their tools, and a hook
//! for when any one's tools change.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};

use agentry_tools::Tool;

use crate::config::McpServerConfig;
use crate::error::McpError;
use crate::options::StartOptions;
use crate::server::McpServer;

/// Several servers, started concurrently.
#[derive(Debug, Default)]
pub struct McpServers {
    servers: Vec<Arc<McpServer>>,
}

impl McpServers {
    /// Starts every server at once; if any fails, those started are shut
    /// down and the first failure (in declaration order) is returned.
    pub async fn start_all(
        configs: Vec<McpServerConfig>,
        options: StartOptions,
    ) -> Result<McpServers, McpError> {
        let mut seen = BTreeSet::new();
        for config in &configs {
            if !seen.insert(config.name.clone()) {
                return Err(McpError::Duplicate {
                    server: config.name.clone(),
                });
            }
        }
        let results = futures::future::join_all(
            configs
                .into_iter()
                .map(|config| McpServer::start(config, options.clone())),
        )
        .await;
        let mut servers = Vec::new();
        let mut failure = None;
        for result in results {
            match result {
                Ok(server) => servers.push(server),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        let started = McpServers { servers };
        match failure {
            Some(e) => {
                started.shutdown().await;
                Err(e)
            }
            None => Ok(started),
        }
    }

    /// Every server's tools, as offered now.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.servers.iter().flat_map(McpServer::tools).collect()
    }

    /// Calls `hook` with these servers each time one's offered tools change
    /// (a `tools/list_changed`, a restarted server listing others), before
    /// its [`McpServer::tools_changed`] moves: e.g. to put a registry with
    /// their new tools in place (`TaskSpec::follow_mcp`). The servers hold
    /// the hook; it holds them weakly, so it never keeps them alive, and it
    /// is dropped at shutdown.
    pub fn on_tools_changed(&self, hook: impl Fn(&McpServers) + Send + Sync + 'static) {
        let hook = Arc::new(hook);
        let weak: Arc<[Weak<McpServer>]> = self.servers.iter().map(Arc::downgrade).collect();
        for server in &self.servers {
            let (hook, weak) = (Arc::clone(&hook), Arc::clone(&weak));
            server.add_hook(Arc::new(move || {
                let servers: Option<Vec<Arc<McpServer>>> = weak.iter().map(Weak::upgrade).collect();
                if let Some(servers) = servers {
                    hook(&McpServers { servers });
                }
            }));
        }
    }

    /// The servers, in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<McpServer>> {
        self.servers.iter()
    }

    /// Shuts every server down (concurrently).
    pub async fn shutdown(&self) {
        futures::future::join_all(self.servers.iter().map(|s| s.shutdown())).await;
    }
}
