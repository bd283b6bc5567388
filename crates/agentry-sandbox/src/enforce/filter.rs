//! The seccomp programs, compiled once per sandbox by seccompiler and
//! installed last in the child.

use std::collections::BTreeMap;
use std::sync::Arc;

use seccompiler::{
    BackendError, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

use crate::error::SandboxError;
use crate::spec::Network;

type Rules = BTreeMap<i64, Vec<SeccompRule>>;

/// Always refused (EPERM): other processes' memory, kernel keys and BPF,
/// perf, mounts and namespaces (old and new mount API), io_uring (its socket
/// and file operations would bypass this filter), kernel modules and kexec.
const REFUSED: [libc::c_long; 27] = [
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
];

const MODULES: [libc::c_long; 3] = [
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
];

/// `clone` flags that make a namespace (CLONE_NEWTIME shares its bit with the
/// exit signal in `clone`, and is refused through `unshare` and `clone3`).
const CLONE_NAMESPACES: [libc::c_int; 7] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
];

/// `personality(0xffffffff)` only queries.
const PERSONALITY_QUERY: u64 = 0xffff_ffff;

/// The programs in installation order: `clone3` → ENOSYS (so libc falls back
/// to `clone`, whose flags the second can see), then the EPERM refusals.
pub(super) fn programs(network: &Network) -> Result<Arc<[BpfProgram]>, SandboxError> {
    build(network).map_err(seccomp_error)
}

fn build(network: &Network) -> Result<Arc<[BpfProgram]>, BackendError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)?;
    let clone3 = with_x32_numbers(BTreeMap::from([(libc::SYS_clone3, Vec::new())]));
    let enosys = compile(clone3, libc::ENOSYS, arch)?;
    let mut refused: Rules = REFUSED
        .iter()
        .chain(&MODULES)
        .map(|syscall| (*syscall, Vec::new()))
        .collect();
    refused.insert(
        libc::SYS_socket,
        socket_rules(matches!(network, Network::Off))?,
    );
    match network {
        Network::On | Network::Off => {}
        // TCP Fast Open connects from `sendto`/`sendmsg`, past `connect`'s
        // checks (with the network off there is no TCP socket to use it on).
        Network::Allow(_) => {
            refused.insert(libc::SYS_sendto, vec![fast_open(3)?]);
            refused.insert(libc::SYS_sendmsg, vec![fast_open(2)?]);
            refused.insert(libc::SYS_sendmmsg, vec![fast_open(3)?]);
        }
    }
    refused.insert(libc::SYS_clone, clone_rules()?);
    refused.insert(
        libc::SYS_personality,
        vec![rule(vec![arg(0, SeccompCmpOp::Ne, PERSONALITY_QUERY)?])?],
    );
    let eperm = compile(with_x32_numbers(refused), libc::EPERM, arch)?;
    Ok(Arc::from(vec![enosys, eperm]))
}

/// The call's flags argument (at `index`) holds `MSG_FASTOPEN`.
fn fast_open(index: u8) -> Result<SeccompRule, BackendError> {
    let flag = libc::MSG_FASTOPEN as u64;
    rule(vec![arg(index, SeccompCmpOp::MaskedEq(flag), flag)?])
}

/// With `host:port` grants: every `connect` goes to the call's init, which
/// checks the address and connects the socket itself (`child/connect.rs`).
/// seccompiler has no user-notification action: the program is compiled
/// with `Trace` and its return value switched to `SECCOMP_RET_USER_NOTIF`.
pub(super) fn connect_program() -> Result<BpfProgram, SandboxError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(seccomp_error)?;
    let rules = with_x32_numbers(BTreeMap::from([(libc::SYS_connect, Vec::new())]));
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Trace(0), arch)
        .map_err(seccomp_error)?;
    let mut program = BpfProgram::try_from(filter).map_err(seccomp_error)?;
    let mut switched = 0;
    for instruction in &mut program {
        if instruction.code == RET_CONSTANT && instruction.k == libc::SECCOMP_RET_TRACE {
            instruction.k = libc::SECCOMP_RET_USER_NOTIF;
            switched += 1;
        }
    }
    if switched == 0 {
        return Err(SandboxError::Seccomp {
            detail: "the connect program has no trace return to switch".to_owned(),
        });
    }
    Ok(program)
}

/// `BPF_RET | BPF_K`.
const RET_CONSTANT: u16 = 0x06;

fn seccomp_error(error: BackendError) -> SandboxError {
    SandboxError::Seccomp {
        detail: error.to_string(),
    }
}

/// Network off: only `AF_UNIX`. Network on or granted: besides `AF_UNIX`,
/// only TCP over IPv4/IPv6 (stream type, protocol 0 or TCP) — no UDP, raw,
/// packet, netlink, vsock or other families, whatever the grant.
fn socket_rules(network_off: bool) -> Result<Vec<SeccompRule>, BackendError> {
    let not_unix = || arg(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64);
    if network_off {
        return Ok(vec![rule(vec![not_unix()?])?]);
    }
    let mut rules = vec![
        rule(vec![
            not_unix()?,
            arg(0, SeccompCmpOp::Ne, libc::AF_INET as u64)?,
            arg(0, SeccompCmpOp::Ne, libc::AF_INET6 as u64)?,
        ])?,
        rule(vec![
            not_unix()?,
            arg(2, SeccompCmpOp::Ne, 0)?,
            arg(2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64)?,
        ])?,
    ];
    for kind in NOT_STREAM {
        let masked = SeccompCmpOp::MaskedEq(SOCK_TYPE_MASK);
        rules.push(rule(vec![not_unix()?, arg(1, masked, kind as u64)?])?);
    }
    Ok(rules)
}

/// The socket type without `SOCK_NONBLOCK`/`SOCK_CLOEXEC`.
const SOCK_TYPE_MASK: u64 = 0xf;

/// Every socket type but `SOCK_STREAM` (the kernel refuses the other values).
const NOT_STREAM: [libc::c_int; 6] = [
    libc::SOCK_DGRAM,
    libc::SOCK_RAW,
    libc::SOCK_RDM,
    libc::SOCK_SEQPACKET,
    libc::SOCK_DCCP,
    // SOCK_PACKET, deprecated: its value, refused like the rest.
    10,
];

/// On x86_64 a kernel built with the x32 ABI takes the same calls under
/// their number with bit 30 set, and the architecture the filter checks is
/// still x86_64: each refusal is repeated under that number. Only when the
/// kernel takes x32 calls: the filter's length is paid at every install.
fn with_x32_numbers(rules: Rules) -> Rules {
    if !x32_calls_accepted() {
        return rules;
    }
    let x32: Vec<(i64, Vec<SeccompRule>)> = rules
        .iter()
        .map(|(number, chain)| (number | X32_SYSCALL_BIT, chain.clone()))
        .collect();
    rules.into_iter().chain(x32).collect()
}

const X32_SYSCALL_BIT: i64 = 0x4000_0000;

/// Whether this kernel runs x32 system calls: x32 `getpid` is ENOSYS when not.
fn x32_calls_accepted() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    // SAFETY: getpid under its x32 number: no arguments, no effect.
    let result = unsafe { libc::syscall(X32_SYSCALL_BIT | libc::SYS_getpid) };
    result >= 0
}

fn clone_rules() -> Result<Vec<SeccompRule>, BackendError> {
    CLONE_NAMESPACES
        .iter()
        .map(|flag| {
            let flag = *flag as u64;
            rule(vec![SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )?])
        })
        .collect()
}

fn arg(index: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, BackendError> {
    SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value)
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, BackendError> {
    SeccompRule::new(conditions)
}

fn compile(rules: Rules, errno: i32, arch: TargetArch) -> Result<BpfProgram, BackendError> {
    let errno = u32::try_from(errno).unwrap_or(libc::EPERM as u32);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno),
        arch,
    )?;
    BpfProgram::try_from(filter)
}
