//! The parent-side building: everything that allocates, resolves, opens or
//! compiles happens here, before fork; `child` only acts on the result.

mod cgroup;
mod exec;
mod filter;
mod kernel;
mod mounts;
mod ruleset;

use std::ffi::CString;
use std::net::ToSocketAddrs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use seccompiler::BpfProgram;

use crate::child;
use crate::error::SandboxError;
use crate::places::{SandboxPlaces, host_sockets};
use crate::plan::{ChildPlan, ConnectGuard, PrivateShm, Rlimit, path_cstring};
use crate::spec::{Mode, Network, SandboxSpec};

pub use kernel::probe;

/// What every call of one sandbox shares.
pub(crate) struct Prepared {
    mode: Mode,
    /// `None`: TCP not handled (network on); else the ports connect may reach.
    ports: Option<Vec<u16>>,
    /// With `host:port` grants: init's check of every connect.
    connect: Option<ConnectGuard>,
    workdir: PathBuf,
    write: Vec<PathBuf>,
    deny: Vec<PathBuf>,
    uid_map: CString,
    gid_map: CString,
    rlimits: Vec<Rlimit>,
    /// The address-space limit, also the call's `/dev/shm` size.
    memory: u64,
    /// Running as root: the call cgroups, made under this process's pids cgroup.
    cgroups: Option<Arc<cgroup::CgroupPool>>,
    fresh_proc: bool,
    filters: Arc<[BpfProgram]>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("mode", &self.mode)
            .field("ports", &self.ports)
            .field("workdir", &self.workdir)
            .field("write", &self.write)
            .field("deny", &self.deny)
            .field("cgroups", &self.cgroups)
            .field("fresh_proc", &self.fresh_proc)
            .field("filters", &self.filters.len())
            .finish_non_exhaustive()
    }
}

impl Prepared {
    pub(crate) fn new(spec: &SandboxSpec, places: &SandboxPlaces) -> Result<Self, SandboxError> {
        let support = kernel::require(spec)?;
        let limits = spec.limits();
        let cgroups = match support.running_as_root {
            true => cgroup::pids_parent()
                .map(|parent| Arc::new(cgroup::CgroupPool::new(parent, limits.processes))),
            false => None,
        };
        let network = resolve_network(&spec.network)?;
        Ok(Prepared {
            mode: spec.mode,
            ports: network.ports,
            connect: network.connect,
            workdir: canonical(&places.workdir)?,
            write: existing(&spec.write),
            deny: existing(
                places
                    .deny
                    .iter()
                    .chain(&spec.read_deny)
                    .chain(&host_sockets()),
            ),
            uid_map: id_map(kernel::euid())?,
            gid_map: id_map(kernel::egid())?,
            rlimits: kernel::rlimits(&limits, support.running_as_root),
            memory: limits.memory.0,
            cgroups,
            fresh_proc: support.fresh_proc,
            filters: filter::programs(&spec.network)?,
        })
    }

    /// The places writable under this mode (besides the call's TMPDIR and devices).
    fn write_roots(&self) -> Vec<&Path> {
        match self.mode {
            Mode::WorkspaceWrite => std::iter::once(self.workdir.as_path())
                .chain(self.write.iter().map(PathBuf::as_path))
                .collect(),
            Mode::ReadOnly | Mode::Off => Vec::new(),
        }
    }
}

/// One call's prepared child data, and its pids cgroup (given back on drop).
#[derive(Debug)]
pub(crate) struct CallPlan {
    child: ChildPlan,
    cgroup: Option<CallCgroup>,
}

impl CallPlan {
    pub(crate) fn new(prepared: &Prepared, tmpdir: &Path) -> Result<Self, SandboxError> {
        let tmpdir = canonical(tmpdir)?;
        let mut writable = prepared.write_roots();
        writable.push(&tmpdir);
        let landlock = ruleset::build(&writable, prepared.ports.as_deref())?;
        let keeps: Vec<&Path> = std::iter::once(prepared.workdir.as_path())
            .chain(prepared.write.iter().map(PathBuf::as_path))
            .chain(std::iter::once(tmpdir.as_path()))
            .collect();
        let read_only = match prepared.mode {
            Mode::WorkspaceWrite => vec![
                prepared.workdir.join(".git"),
                prepared.workdir.join(".agentry"),
            ],
            Mode::ReadOnly | Mode::Off => Vec::new(),
        };
        let mounts = mounts::plan(&prepared.deny, &keeps, &read_only)?;
        // Not over a place the call needs (a workdir under /dev/shm).
        let shm = match keeps.iter().any(|keep| keep.starts_with(SHM)) {
            true => None,
            false => Some(PrivateShm {
                options: shm_options(prepared.memory)?,
                rights: ruleset::write_rights(),
            }),
        };
        let cgroup = match &prepared.cgroups {
            Some(pool) => Some(CallCgroup {
                dir: pool.take()?,
                pool: Arc::clone(pool),
            }),
            None => None,
        };
        let cgroup_procs = match &cgroup {
            Some(cgroup) => Some(path_cstring(&cgroup.dir.join("cgroup.procs"))?),
            None => None,
        };
        let child = ChildPlan {
            cgroup_procs,
            uid_map: prepared.uid_map.clone(),
            gid_map: prepared.gid_map.clone(),
            mounts,
            fresh_proc: prepared.fresh_proc,
            rlimits: prepared.rlimits.clone(),
            landlock,
            filters: Arc::clone(&prepared.filters),
            connect: prepared.connect.clone(),
            shm,
        };
        Ok(CallPlan { child, cgroup })
    }
}

/// A call's pids cgroup and the pool it goes back to.
#[derive(Debug)]
struct CallCgroup {
    pool: Arc<cgroup::CgroupPool>,
    dir: PathBuf,
}

impl Drop for CallPlan {
    fn drop(&mut self) {
        if let Some(cgroup) = self.cgroup.take() {
            cgroup.pool.give_back(cgroup.dir);
        }
    }
}

/// Registers the child's steps on `command`, whose environment must be
/// exactly the variables it sets (`env_clear` first): the confined command
/// execs itself with them.
pub(crate) fn register(plan: &Arc<CallPlan>, command: &mut Command) {
    let plan = Arc::clone(plan);
    let Some(exec) = exec::plan(command) else {
        // SAFETY: the closure makes no call at all.
        unsafe {
            command.pre_exec(|| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the program, an argument or the environment holds a NUL byte",
                ))
            });
        }
        return;
    };
    // SAFETY: the closure runs between fork and exec and only makes
    // async-signal-safe syscalls on data prepared before the fork (child.rs).
    unsafe {
        command.pre_exec(move || child::enter(&plan.child, &exec));
    }
}

/// What a spec's `network` asks of Landlock and of init.
struct NetworkPlan {
    /// `None`: TCP not handled (network on); else the ports connect may reach.
    ports: Option<Vec<u16>>,
    /// With grants: the addresses init lets connects through to.
    connect: Option<ConnectGuard>,
}

fn resolve_network(network: &Network) -> Result<NetworkPlan, SandboxError> {
    match network {
        Network::On => Ok(NetworkPlan {
            ports: None,
            connect: None,
        }),
        Network::Off => Ok(NetworkPlan {
            ports: Some(Vec::new()),
            connect: None,
        }),
        Network::Allow(grants) => {
            let mut allowed = Vec::new();
            for grant in grants {
                let addresses = (grant.host.as_str(), grant.port)
                    .to_socket_addrs()
                    .map_err(|source| SandboxError::Resolve {
                        grant: grant.to_string(),
                        source,
                    })?;
                allowed.extend(addresses);
            }
            allowed.sort();
            allowed.dedup();
            Ok(NetworkPlan {
                ports: Some(grants.iter().map(|grant| grant.port).collect()),
                connect: Some(ConnectGuard {
                    program: Arc::new(filter::connect_program()?),
                    allowed: Arc::from(allowed),
                }),
            })
        }
    }
}

/// Where POSIX shared memory lives.
const SHM: &str = "/dev/shm";

/// The call's `/dev/shm`: sticky and world-writable as the host's, at most
/// the call's memory limit.
fn shm_options(memory: u64) -> Result<CString, SandboxError> {
    let options = format!("mode=1777,size={memory}");
    CString::new(options.clone()).map_err(|_| SandboxError::InvalidSetting {
        key: "memory",
        value: options,
        reason: "not valid tmpfs options".to_owned(),
    })
}

fn canonical(path: &Path) -> Result<PathBuf, SandboxError> {
    path.canonicalize().map_err(|source| SandboxError::Path {
        path: path.to_path_buf(),
        source,
    })
}

/// The paths that exist, canonical; a missing one has nothing to protect or grant.
fn existing<'a>(paths: impl IntoIterator<Item = &'a PathBuf>) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = paths
        .into_iter()
        .filter_map(|path| path.canonicalize().ok())
        .collect();
    found.sort();
    found.dedup();
    found
}

fn id_map(id: u32) -> Result<CString, SandboxError> {
    CString::new(format!("{id} {id} 1\n")).map_err(|_| SandboxError::InvalidSetting {
        key: "id map",
        value: id.to_string(),
        reason: "not a valid map line".to_owned(),
    })
}
