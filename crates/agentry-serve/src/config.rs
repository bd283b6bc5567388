//! What the service allows: who may call it, and how much it takes in.

use std::time::Duration;

use std::sync::Arc;

use super::agents::Agents;
use super::allowed::{AllowedHost, AllowedOrigin};
use super::error::ServeError;
use super::events::ReplayLimits;
use super::limits::RunLimits;
use super::serve;
use super::streams::StreamLimits;
use super::tenants::Tokens;
use super::webhooks::Webhooks;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// Who may call the service, and how much it takes in. The default suits a
/// service on localhost without tokens; the embedder sets the fields.
#[derive(Debug, Clone, Default)]
pub struct ServiceConfig {
    /// Host names answered besides the bound address (`--allow-host`).
    pub allow_hosts: Vec<AllowedHost>,
    /// Origins whose pages may call the service (`--allow-origin`); none by default.
    pub allow_origins: Vec<AllowedOrigin>,
    /// Sizes, counts and timeouts.
    pub limits: Limits,
    /// What `GET /metrics` serves: the metrics whose layer is in the process's
    /// subscriber (`main.rs` installs it); `None` answers 404.
    pub metrics: Option<agentry::metrics::Metrics>,
    /// The bearer tokens every route but `/healthz` needs, and the tenants
    /// they stand for; `None`: no token is asked for and every caller is
    /// anyone (`--no-auth`, loopback only).
    pub tokens: Option<Tokens>,
    /// The operator's named agents (`POST /runs {"agent": ...}`); `None`:
    /// inline tasks only.
    pub agents: Option<Arc<dyn Agents>>,
    /// Completion webhooks (`[serve] webhook_hosts`); `None`: a request
    /// naming a webhook is refused.
    pub webhooks: Option<Arc<Webhooks>>,
    /// Stopped runs older than this are removed, records, working directory
    /// and delivered webhook (`[serve] retention`); `None`: kept.
    pub retention: Option<Duration>,
    /// Runs holding a slot and waiting for one, and each tenant's limits.
    pub run_limits: RunLimits,
    /// The store's file, when it is one: `GET /healthz` answers 503 once it
    /// is removed or replaced (the service would write to a file no later
    /// start reads).
    pub store_file: Option<std::path::PathBuf>,
    /// Where inline tasks' working directories are made (`[serve]
    /// workdir_root`); `None`: the private temp directory.
    pub workdir_root: Option<std::path::PathBuf>,
}

/// What the service holds for its clients, at most: [`LimitSettings`] makes
/// them from serve.toml's `[serve]` keys or the embedding example's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Body of a message, event, interrupt or decision, in bytes.
    pub message_bytes: usize,
    /// Body of `POST /runs` (the task, its script and its files), in bytes.
    pub create_bytes: usize,
    /// Message, event and redirect bodies one run takes in over its life, in
    /// bytes: a paused run keeps every message it is sent.
    pub run_input_bytes: u64,
    /// Messages, events and redirects one run holds that its model has not
    /// seen yet (each run's `inbox_capacity`); past it such a POST is 429.
    pub inbox_capacity: usize,
    /// For a request's body to arrive, from its head.
    pub body_timeout: Duration,
    /// For a request's head to arrive, and for a connection idle between requests.
    pub header_timeout: Duration,
    /// Open connections.
    pub max_connections: usize,
    /// Open event streams, per run and in total; the total stays below
    /// `max_connections`, so short requests always find a connection.
    pub streams: StreamLimits,
    /// Each run's event history kept for late clients, in bytes.
    pub replay: ReplayLimits,
    /// Stopped runs kept; past this, the oldest is forgotten (404 afterwards,
    /// and its working directory removed).
    pub keep_stopped: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            message_bytes: MIB,
            create_bytes: 64 * MIB,
            run_input_bytes: 64 * MIB as u64,
            inbox_capacity: agentry::DEFAULT_INBOX_CAPACITY,
            body_timeout: Duration::from_secs(30),
            header_timeout: Duration::from_secs(10),
            max_connections: serve::default_max_connections(),
            streams: StreamLimits::for_connections(serve::default_max_connections()),
            replay: ReplayLimits {
                live_bytes: 8 * MIB,
                stopped_bytes: 256 * KIB,
            },
            keep_stopped: 1000,
        }
    }
}

/// The limits as an operator gives them: serve.toml's `[serve]` keys and
/// the embedding example's flags, under the same names. `None` keeps
/// [`Limits::default`]'s value; counts and sizes are positive where given
/// (the file and the flags refuse zero before this).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitSettings {
    /// [`Limits::message_bytes`].
    pub max_message_bytes: Option<u64>,
    /// [`Limits::create_bytes`].
    pub max_create_bytes: Option<u64>,
    /// [`Limits::run_input_bytes`].
    pub max_run_input_bytes: Option<u64>,
    /// [`Limits::inbox_capacity`].
    pub inbox_capacity: Option<u64>,
    /// [`Limits::header_timeout`].
    pub header_timeout: Option<Duration>,
    /// [`Limits::body_timeout`].
    pub body_timeout: Option<Duration>,
    /// [`Limits::max_connections`].
    pub max_connections: Option<u32>,
    /// [`StreamLimits::total`]; must be below `max_connections`.
    pub max_streams: Option<u32>,
    /// [`StreamLimits::per_run`].
    pub max_streams_per_run: Option<u32>,
    /// [`ReplayLimits::live_bytes`].
    pub replay_bytes: Option<u64>,
    /// [`ReplayLimits::stopped_bytes`].
    pub stopped_replay_bytes: Option<u64>,
    /// [`Limits::keep_stopped`].
    pub keep_stopped: Option<usize>,
}

impl LimitSettings {
    /// The limits these settings make, the defaults filling what is unset.
    /// The one error is [`ServeError::StreamsTakeEveryConnection`]: a
    /// `max_streams` at or above the connection limit.
    pub fn limits(&self) -> Result<Limits, ServeError> {
        let d = Limits::default();
        let bytes = |given: Option<u64>, default: usize| {
            given.map_or(default, |n| usize::try_from(n).unwrap_or(usize::MAX))
        };
        let max_connections = self
            .max_connections
            .map_or(d.max_connections, |n| n as usize);
        let defaults = StreamLimits::for_connections(max_connections);
        let streams = StreamLimits {
            per_run: self
                .max_streams_per_run
                .map_or(defaults.per_run, |n| n as usize),
            total: self.max_streams.map_or(defaults.total, |n| n as usize),
        };
        // The default is always below the limit but for `max_connections =
        // 1`, whose one connection serves a stream or a request.
        if self.max_streams.is_some() && streams.total >= max_connections {
            return Err(ServeError::StreamsTakeEveryConnection {
                streams: streams.total,
                connections: max_connections,
            });
        }
        Ok(Limits {
            message_bytes: bytes(self.max_message_bytes, d.message_bytes),
            create_bytes: bytes(self.max_create_bytes, d.create_bytes),
            run_input_bytes: self.max_run_input_bytes.unwrap_or(d.run_input_bytes),
            inbox_capacity: bytes(self.inbox_capacity, d.inbox_capacity),
            body_timeout: self.body_timeout.unwrap_or(d.body_timeout),
            header_timeout: self.header_timeout.unwrap_or(d.header_timeout),
            max_connections,
            streams,
            replay: ReplayLimits {
                live_bytes: bytes(self.replay_bytes, d.replay.live_bytes),
                stopped_bytes: bytes(self.stopped_replay_bytes, d.replay.stopped_bytes),
            },
            keep_stopped: self.keep_stopped.unwrap_or(d.keep_stopped),
        })
    }
}
