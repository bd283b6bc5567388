//! What a task asks of the sandbox: `[sandbox]` in task.toml, per-tool
//! overrides, and the summary spans and traces carry.

// Size: the spec with its units (sizes, durations, host:port), its merge
// rule and its widenings, and their tests, read as one unit.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::SandboxError;

/// Default address-space limit (`RLIMIT_AS`).
pub const DEFAULT_MEMORY: ByteSize = ByteSize(2 << 30);
/// Default process limit (`RLIMIT_NPROC` inside the call's user namespace).
pub const DEFAULT_PROCESSES: u64 = 256;
/// Default largest file a process may write (`RLIMIT_FSIZE`).
pub const DEFAULT_FILE_SIZE: ByteSize = ByteSize(1 << 30);
/// Default CPU time (`RLIMIT_CPU`).
pub const DEFAULT_CPU_TIME: Duration = Duration::from_secs(600);

/// The sandbox a task (or an embedder's `RunConfig`) asks for. `Default` is
/// workspace-write, no network, the default limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxSpec {
    /// What the process may write.
    pub mode: Mode,
    /// Outbound TCP: none, any, or the listed `host:port`s (see [`Network`]).
    pub network: Network,
    /// Extra writable roots (workspace-write only).
    pub write: Vec<PathBuf>,
    /// Extra unreadable roots, on top of [`default_read_deny`](crate::default_read_deny) and the host's.
    pub read_deny: Vec<PathBuf>,
    /// Address-space limit (`RLIMIT_AS`); `None` is the default, 2 GiB.
    #[serde(with = "opt_size")]
    pub memory: Option<ByteSize>,
    /// Process limit (`RLIMIT_NPROC`); `None` is the default, 256.
    pub processes: Option<u64>,
    /// Largest file a process may write (`RLIMIT_FSIZE`); `None` is the default, 1 GiB.
    #[serde(with = "opt_size")]
    pub file_size: Option<ByteSize>,
    /// CPU time (`RLIMIT_CPU`), `"10m"`, `"30s"`; `None` is the default, 10 minutes.
    #[serde(with = "opt_duration")]
    pub cpu_time: Option<Duration>,
}

impl Default for SandboxSpec {
    fn default() -> Self {
        SandboxSpec {
            mode: Mode::WorkspaceWrite,
            network: Network::Off,
            write: Vec::new(),
            read_deny: Vec::new(),
            memory: None,
            processes: None,
            file_size: None,
            cpu_time: None,
        }
    }
}

/// What a sandboxed process may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The working directory (minus `.git/` and `.agentry/`), the call's TMPDIR,
    /// the `write` roots and `/dev/null`-like devices.
    WorkspaceWrite,
    /// The call's TMPDIR and `/dev/null`-like devices only.
    ReadOnly,
    /// No sandbox: the operator's full reach (said in traces and `agentry tools`).
    Off,
}

impl Mode {
    /// The name task.toml uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::WorkspaceWrite => "workspace-write",
            Mode::ReadOnly => "read-only",
            Mode::Off => "off",
        }
    }
}

/// Outbound network. In task.toml: `false`, `true` or `["host:port", ...]`.
///
/// A grant's host is resolved when the sandbox is prepared; the process may
/// then connect over TCP to those addresses at that port only (Landlock
/// limits the ports, the call's init checks every connect's address). UDP
/// and raw sockets are refused whatever the setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Network {
    /// No outbound TCP; only `AF_UNIX` sockets.
    Off,
    /// TCP to anywhere (still no UDP or raw sockets).
    On,
    /// TCP connect to these ports only (hosts resolved at prepare, not enforced).
    Allow(Vec<HostPort>),
}

/// One `host:port` network grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// The host as written (a name or an address).
    pub host: String,
    /// The TCP port.
    pub port: u16,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl FromStr for HostPort {
    type Err = SandboxError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = |reason: &str| SandboxError::InvalidSetting {
            key: "network",
            value: text.to_owned(),
            reason: reason.to_owned(),
        };
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| invalid("expected \"host:port\""))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(invalid("the host is empty"));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| invalid("the port is not a number from 1 to 65535"))?;
        if port == 0 {
            return Err(invalid("the port is not a number from 1 to 65535"));
        }
        Ok(HostPort {
            host: host.to_owned(),
            port,
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum NetworkRepr {
    Flag(bool),
    List(Vec<String>),
}

impl Serialize for Network {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let repr = match self {
            Network::Off => NetworkRepr::Flag(false),
            Network::On => NetworkRepr::Flag(true),
            Network::Allow(grants) => {
                NetworkRepr::List(grants.iter().map(ToString::to_string).collect())
            }
        };
        repr.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let repr = NetworkRepr::deserialize(deserializer).map_err(|_| {
            serde::de::Error::custom("network: expected false, true or [\"host:port\", ...]")
        })?;
        match repr {
            NetworkRepr::Flag(false) => Ok(Network::Off),
            NetworkRepr::Flag(true) => Ok(Network::On),
            NetworkRepr::List(entries) => entries
                .iter()
                .map(|entry| entry.parse::<HostPort>())
                .collect::<Result<Vec<_>, _>>()
                .map(Network::Allow)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// A size in bytes, written `"2GiB"`, `"512MiB"`, `"64KiB"`, `"1GB"` or `"4096"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

const SIZE_UNITS: [(&str, u64); 9] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("TB", 1_000_000_000_000),
    ("GB", 1_000_000_000),
    ("MB", 1_000_000),
    ("KB", 1_000),
    ("B", 1),
];

impl FromStr for ByteSize {
    type Err = SandboxError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || {
            SandboxError::InvalidSetting {
            key: "size",
            value: text.to_owned(),
            reason: "expected a whole number with an optional unit: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB (\"2GiB\")".to_owned(),
        }
        };
        let trimmed = text.trim();
        let (number, unit) = SIZE_UNITS
            .iter()
            .find_map(|(name, factor)| trimmed.strip_suffix(name).map(|n| (n, *factor)))
            .unwrap_or((trimmed, 1));
        let number: u64 = number.trim().parse().map_err(|_| invalid())?;
        number.checked_mul(unit).map(ByteSize).ok_or_else(invalid)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let binary = SIZE_UNITS.iter().take(4);
        match binary
            .into_iter()
            .find(|(_, factor)| self.0 != 0 && self.0.is_multiple_of(*factor))
        {
            Some((name, factor)) => write!(f, "{}{name}", self.0 / factor),
            None => write!(f, "{}B", self.0),
        }
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Bytes(u64),
            Text(String),
        }
        match Repr::deserialize(deserializer)? {
            Repr::Bytes(bytes) => Ok(ByteSize(bytes)),
            Repr::Text(text) => text.parse().map_err(serde::de::Error::custom),
        }
    }
}

mod opt_size {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::ByteSize;

    pub fn serialize<S: Serializer>(value: &Option<ByteSize>, s: S) -> Result<S::Ok, S::Error> {
        value.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ByteSize>, D::Error> {
        Option::<ByteSize>::deserialize(d)
    }
}

mod opt_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(duration) => s.collect_str(&crate::duration::format_duration(*duration)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| crate::duration::parse_duration(&text).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// A per-tool override: every field optional, set fields replace the task's.
/// In task.toml: `sandbox = { network = true }` on `[[tools.command]]` or `[[tools.mcp]]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxOverride {
    /// Replaces the mode.
    pub mode: Option<Mode>,
    /// Replaces the network setting.
    pub network: Option<Network>,
    /// Replaces the extra writable roots.
    pub write: Option<Vec<PathBuf>>,
    /// Replaces the extra unreadable roots (the defaults always stay).
    pub read_deny: Option<Vec<PathBuf>>,
    /// Replaces the address-space limit.
    #[serde(with = "opt_size")]
    pub memory: Option<ByteSize>,
    /// Replaces the process limit.
    pub processes: Option<u64>,
    /// Replaces the file-size limit.
    #[serde(with = "opt_size")]
    pub file_size: Option<ByteSize>,
    /// Replaces the CPU-time limit.
    #[serde(with = "opt_duration")]
    pub cpu_time: Option<Duration>,
}

impl SandboxSpec {
    /// This spec with the override's set fields replacing its own.
    pub fn with_override(&self, over: &SandboxOverride) -> SandboxSpec {
        SandboxSpec {
            mode: over.mode.unwrap_or(self.mode),
            network: over.network.clone().unwrap_or_else(|| self.network.clone()),
            write: over.write.clone().unwrap_or_else(|| self.write.clone()),
            read_deny: over
                .read_deny
                .clone()
                .unwrap_or_else(|| self.read_deny.clone()),
            memory: over.memory.or(self.memory),
            processes: over.processes.or(self.processes),
            file_size: over.file_size.or(self.file_size),
            cpu_time: over.cpu_time.or(self.cpu_time),
        }
    }

    /// The keys of this spec that reach past the default sandbox (mode off,
    /// any network, extra writable roots, limits above the defaults), in
    /// file order: what a task a client sends may not set. Narrowing
    /// (read-only, more `read_deny`, lower limits) is not listed.
    pub fn widenings(&self) -> Vec<&'static str> {
        let mut keys = Vec::new();
        match self.mode {
            Mode::Off => keys.push("mode"),
            Mode::WorkspaceWrite | Mode::ReadOnly => {}
        }
        match self.network {
            Network::Off => {}
            Network::On | Network::Allow(_) => keys.push("network"),
        }
        if !self.write.is_empty() {
            keys.push("write");
        }
        let limits = self.limits();
        if limits.memory.0 > DEFAULT_MEMORY.0 {
            keys.push("memory");
        }
        if limits.processes > DEFAULT_PROCESSES {
            keys.push("processes");
        }
        if limits.file_size.0 > DEFAULT_FILE_SIZE.0 {
            keys.push("file_size");
        }
        if limits.cpu_time > DEFAULT_CPU_TIME {
            keys.push("cpu_time");
        }
        keys
    }

    /// The limits in force (defaults filled in).
    pub fn limits(&self) -> Limits {
        Limits {
            memory: self.memory.unwrap_or(DEFAULT_MEMORY),
            processes: self.processes.unwrap_or(DEFAULT_PROCESSES),
            file_size: self.file_size.unwrap_or(DEFAULT_FILE_SIZE),
            cpu_time: self.cpu_time.unwrap_or(DEFAULT_CPU_TIME),
        }
    }

    /// What spans, trace records and `agentry tools` show.
    pub fn summary(&self) -> SandboxSummary {
        let limits = match self.mode {
            Mode::Off => None,
            Mode::WorkspaceWrite | Mode::ReadOnly => Some(self.limits()),
        };
        SandboxSummary {
            mode: self.mode,
            network: self.network.clone(),
            network_note: match self.network {
                Network::Allow(_) => Some(NETWORK_GRANTS_NOTE.to_owned()),
                Network::Off | Network::On => None,
            },
            limits,
        }
    }
}

/// What a grant list means, said wherever the list is shown.
pub const NETWORK_GRANTS_NOTE: &str = "TCP connect only to the granted hosts' addresses (resolved at start) and ports; UDP and raw sockets refused";

/// The resource limits in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// `RLIMIT_AS`.
    pub memory: ByteSize,
    /// `RLIMIT_NPROC`.
    pub processes: u64,
    /// `RLIMIT_FSIZE`.
    pub file_size: ByteSize,
    /// `RLIMIT_CPU`.
    #[serde(with = "text_duration")]
    pub cpu_time: Duration,
}

mod text_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&crate::duration::format_duration(*value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        crate::duration::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

/// The sandbox a process ran under, for spans, trace records and `agentry tools`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSummary {
    /// The mode.
    pub mode: Mode,
    /// The network setting.
    pub network: Network,
    /// What a grant list really enforces (set when `network` is a list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_note: Option<String>,
    /// The limits; absent when the mode is `off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
}

impl fmt::Display for SandboxSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mode.as_str())?;
        if self.mode == Mode::Off {
            return Ok(());
        }
        match &self.network {
            Network::Off => f.write_str(", no network")?,
            Network::On => f.write_str(", network")?,
            Network::Allow(grants) => {
                let ports: Vec<String> = grants.iter().map(ToString::to_string).collect();
                write!(f, ", network {} (TCP)", ports.join(" "))?;
            }
        }
        if let Some(limits) = &self.limits {
            write!(
                f,
                ", memory {}, processes {}, file size {}, cpu {}",
                limits.memory,
                limits.processes,
                limits.file_size,
                crate::duration::format_duration(limits.cpu_time)
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_parse_with_units() {
        assert_eq!("2GiB".parse::<ByteSize>().unwrap(), ByteSize(2 << 30));
        assert_eq!("512 MiB".parse::<ByteSize>().unwrap(), ByteSize(512 << 20));
        assert_eq!("1GB".parse::<ByteSize>().unwrap(), ByteSize(1_000_000_000));
        assert_eq!("4096".parse::<ByteSize>().unwrap(), ByteSize(4096));
        assert_eq!(ByteSize(2 << 30).to_string(), "2GiB");
        assert_eq!(ByteSize(1000).to_string(), "1000B");
        assert_eq!(
            crate::parse_duration("10m").unwrap(),
            Duration::from_secs(600)
        );
    }

    #[test]
    fn bad_values_are_named() {
        let error = "2 gigs".parse::<ByteSize>().unwrap_err().to_string();
        assert!(
            error.contains("\"2 gigs\"") && error.contains("GiB"),
            "{error}"
        );
        let error = toml::from_str::<SandboxSpec>("cpu_time = \"ten minutes\"")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("cpu_time") && error.contains("10m"),
            "{error}"
        );
        let error = toml::from_str::<SandboxSpec>("network = [\"example.org\"]")
            .unwrap_err()
            .to_string();
        assert!(error.contains("host:port"), "{error}");
        let error = toml::from_str::<SandboxSpec>("netwrk = true")
            .unwrap_err()
            .to_string();
        assert!(error.contains("netwrk"), "{error}");
    }

    #[test]
    fn widenings_name_what_reaches_past_the_default_and_not_what_narrows() {
        let narrow: SandboxSpec = toml::from_str(
            "mode = \"read-only\"\nread_deny = [\"/srv\"]\nmemory = \"1GiB\"\nprocesses = 16",
        )
        .unwrap();
        assert!(narrow.widenings().is_empty(), "{:?}", narrow.widenings());
        assert!(SandboxSpec::default().widenings().is_empty());
        let wide: SandboxSpec = toml::from_str(
            "mode = \"off\"\nnetwork = [\"127.0.0.1:80\"]\nwrite = [\"/srv\"]\nmemory = \"4GiB\"\nprocesses = 1000\nfile_size = \"2GiB\"\ncpu_time = \"1h\"",
        )
        .unwrap();
        assert_eq!(
            wide.widenings(),
            [
                "mode",
                "network",
                "write",
                "memory",
                "processes",
                "file_size",
                "cpu_time"
            ]
        );
    }

    #[test]
    fn task_toml_forms_and_overrides() {
        let spec: SandboxSpec = toml::from_str(
            "mode = \"read-only\"\nnetwork = [\"example.org:443\", \"[::1]:8080\"]\nmemory = \"1GiB\"\nprocesses = 16\ncpu_time = \"30s\"",
        )
        .unwrap();
        assert_eq!(spec.mode, Mode::ReadOnly);
        assert_eq!(
            spec.network,
            Network::Allow(vec![
                HostPort {
                    host: "example.org".into(),
                    port: 443
                },
                HostPort {
                    host: "::1".into(),
                    port: 8080
                },
            ])
        );
        let over: SandboxOverride = toml::from_str("network = true\nprocesses = 64").unwrap();
        let merged = spec.with_override(&over);
        assert_eq!(merged.network, Network::On);
        assert_eq!(merged.limits().processes, 64);
        assert_eq!(merged.limits().memory, ByteSize(1 << 30));
        assert_eq!(SandboxSpec::default().limits().cpu_time, DEFAULT_CPU_TIME);
        let summary = serde_json::to_value(spec.summary()).unwrap();
        assert_eq!(summary["mode"], "read-only");
        assert_eq!(
            summary["network"],
            serde_json::json!(["example.org:443", "[::1]:8080"])
        );
        assert_eq!(summary["limits"]["memory"], "1GiB");
        assert_eq!(summary["limits"]["cpu_time"], "30s");
        assert!(
            summary["network_note"]
                .as_str()
                .unwrap()
                .contains("granted hosts")
        );
        assert_eq!(
            spec.summary().to_string(),
            "read-only, network example.org:443 [::1]:8080 (TCP), memory 1GiB, processes 16, file size 1GiB, cpu 30s"
        );
        let off = SandboxSpec {
            mode: Mode::Off,
            ..SandboxSpec::default()
        };
        assert_eq!(off.summary().to_string(), "off");
        assert!(
            serde_json::to_value(off.summary())
                .unwrap()
                .get("limits")
                .is_none()
        );
    }
}
