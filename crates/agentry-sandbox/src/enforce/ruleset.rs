//! The call's Landlock ruleset, built in the parent; the child only calls
//! `landlock_restrict_self` on its descriptor.

use std::os::fd::OwnedFd;
use std::path::Path;

use landlock::{
    ABI, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetError, Scope, path_beneath_rules,
};

use crate::error::SandboxError;

/// The ABI whose rights are handled: fixed, so the sandbox is the same on
/// every kernel that has it (older ones are refused, not downgraded).
const ABI_HANDLED: ABI = ABI::V6;

/// Devices any process may write (and, for terminals, ioctl).
const DEVICES: [&str; 6] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// Read everything; write only beneath `writable`; TCP connect only to
/// `ports` (`None`: TCP not handled); no signals or abstract sockets outside.
pub(super) fn build(writable: &[&Path], ports: Option<&[u16]>) -> Result<OwnedFd, SandboxError> {
    let created = build_ruleset(writable, ports).map_err(|error| SandboxError::Landlock {
        detail: error.to_string(),
    })?;
    created.ok_or_else(|| SandboxError::Unsupported {
        what: "a Landlock ruleset (the kernel made none)".to_owned(),
    })
}

fn build_ruleset(
    writable: &[&Path],
    ports: Option<&[u16]>,
) -> Result<Option<OwnedFd>, RulesetError> {
    let write = AccessFs::from_write(ABI_HANDLED);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(write)?
        .scope(Scope::Signal | Scope::AbstractUnixSocket)?;
    if ports.is_some() {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    let mut created = ruleset
        .create()?
        .add_rules(path_beneath_rules(writable, write))?
        .add_rules(device_rules())?;
    for port in ports.unwrap_or_default() {
        created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp))?;
    }
    Ok(Option::<OwnedFd>::from(created))
}

/// The rights granted beneath a writable place, as the kernel's bit mask
/// (for a place init mounts after the ruleset was built: its `/dev/shm`).
pub(super) fn write_rights() -> u64 {
    AccessFs::from_write(ABI_HANDLED).bits()
}

fn device_rules() -> impl Iterator<Item = Result<PathBeneath<PathFd>, RulesetError>> {
    let rights: BitFlags<AccessFs> = AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    DEVICES
        .iter()
        .filter_map(|path| PathFd::new(path).ok())
        .map(move |fd| Ok(PathBeneath::new(fd, rights)))
}
