//! Set-up errors of the verbs fabric, each one line naming what to check, and the mapping of
//! work-completion statuses to the contract's [`FabricError`].
use super::sys;
use remora_core::fabric::FabricError;
use remora_layouts::{GlobalAddr, NodeId};
use std::fmt;

/// Why a device, memory node or connection could not be set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerbsError {
    /// The machine has no RDMA device at all.
    NoDevice,
    /// `--device NAME` names no device.
    NoSuchDevice {
        /// The name asked for.
        name: String,
        /// The devices there are, comma-separated.
        found: String,
    },
    /// The device exists but its character device cannot be opened.
    Permission {
        /// The device (or `rdma_cm` for the connection manager).
        device: String,
        /// The character device that could not be opened (`/dev/infiniband/...`).
        path: String,
        /// The open's errno (`EACCES` or `EPERM`).
        errno: i32,
    },
    /// No port of the device is ACTIVE.
    PortDown {
        /// The device.
        device: String,
        /// The port checked (1-based, as rdma-core numbers them).
        port: u8,
        /// Its state as rdma-core names it (`DOWN`, `INIT`, `ARMED`, ...).
        state: &'static str,
    },
    /// Memory registration failed (usually the locked-memory limit).
    Register {
        /// Bytes the registration asked for.
        bytes: usize,
        /// `ibv_reg_mr`'s errno.
        errno: i32,
    },
    /// A listen or connect address that does not parse or resolve.
    BadAddress {
        /// The address as given.
        addr: String,
        /// What is wrong with it.
        why: String,
    },
    /// rdma_cm found no RDMA device behind the address.
    Resolve {
        /// The address.
        addr: String,
        /// Which resolution step failed.
        why: &'static str,
    },
    /// The connection went to another device than `--device` named.
    WrongDevice {
        /// The address connected to (or listened on).
        addr: String,
        /// The device the route goes through.
        via: String,
        /// The device `--device` named.
        wanted: String,
    },
    /// The memory node refused the connection, or no one listens there.
    Refused {
        /// The memory node's address.
        addr: String,
    },
    /// The memory node refused the request for its key.
    Unauthorized {
        /// The memory node's address.
        addr: String,
        /// Why, and what to change, in the client's terms (its key file, its clock).
        why: String,
    },
    /// rdma_cm could not reach the peer (no route, transport timeout).
    Unreachable {
        /// The peer's address.
        addr: String,
        /// The connection step that failed.
        stage: &'static str,
    },
    /// The peer did not answer in time.
    Timeout {
        /// The peer's address.
        addr: String,
        /// The connection step that was waiting.
        stage: &'static str,
        /// How long it waited, in whole seconds (`ConnectOptions::timeout`).
        secs: u64,
    },
    /// The peer answered with bytes that are not remora's connection protocol.
    Protocol {
        /// The peer's address.
        addr: String,
        /// What was wrong with its answer.
        why: &'static str,
    },
    /// Any other failing call, with its errno.
    Sys {
        /// The call (or step) that failed.
        what: &'static str,
        /// Its errno, or the errno that best names the failure when the call sets none (0
        /// when none fits).
        errno: i32,
    },
}

fn errno_text(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbsError::NoDevice => write!(
                f,
                "no RDMA device found (/sys/class/infiniband_verbs is empty or missing): on a \
                 machine without an RDMA NIC load Soft-RoCE (`modprobe rdma_rxe && rdma link add \
                 rxe0 type rxe netdev <interface>`), or use `--fabric soft`"
            ),
            VerbsError::NoSuchDevice { name, found } => write!(
                f,
                "no RDMA device named {name} (found: {found}); check `--device` against \
                 `rdma link show`"
            ),
            VerbsError::Permission {
                device,
                path,
                errno,
            } => write!(
                f,
                "no permission to open RDMA device {device} ({path}: {}): run as root or give \
                 your user read/write access to /dev/infiniband/uverbs*",
                errno_text(*errno)
            ),
            VerbsError::PortDown {
                device,
                port,
                state,
            } => write!(
                f,
                "port {port} of RDMA device {device} is {state}, not ACTIVE: check the link \
                 with `rdma link show` (for Soft-RoCE the underlying network interface must be up)"
            ),
            VerbsError::Register { bytes, errno } => write!(
                f,
                "cannot register {bytes} bytes with the RDMA device ({}): raise the locked-memory \
                 limit (`ulimit -l unlimited`, or memlock in /etc/security/limits.conf)",
                errno_text(*errno)
            ),
            VerbsError::BadAddress { addr, why } => {
                write!(f, "bad address {addr:?}: {why}; expected host:port")
            }
            VerbsError::Resolve { addr, why } => write!(
                f,
                "cannot reach {addr} through an RDMA device ({why}): the address must be on a \
                 network interface that has an RDMA device (`rdma link show`)"
            ),
            VerbsError::WrongDevice { addr, via, wanted } => write!(
                f,
                "{addr} is reached through RDMA device {via}, not {wanted}: fix `--device` or \
                 the address"
            ),
            VerbsError::Refused { addr } => write!(
                f,
                "the memory node at {addr} refused the connection: is `remora memnode --fabric \
                 verbs --listen {addr}` running?"
            ),
            VerbsError::Unauthorized { addr, why } => {
                write!(f, "the memory node at {addr} refused the connection: {why}")
            }
            VerbsError::Unreachable { addr, stage } => write!(
                f,
                "cannot reach {addr} ({stage}): check that the memory node runs and that the \
                 RDMA ports on both sides are ACTIVE"
            ),
            VerbsError::Timeout { addr, stage, secs } => write!(
                f,
                "no answer from {addr} within {secs} s ({stage}): check that the memory node \
                 runs and is reachable"
            ),
            VerbsError::Protocol { addr, why } => write!(
                f,
                "{addr} does not speak remora's verbs protocol ({why}): is it a `remora memnode \
                 --fabric verbs` of the same version?"
            ),
            VerbsError::Sys { what, errno } => write!(f, "{what} failed: {}", errno_text(*errno)),
        }
    }
}

impl std::error::Error for VerbsError {}

/// The calling thread's errno.
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A failing call, with the current errno.
pub(crate) fn sys_err(what: &'static str) -> VerbsError {
    VerbsError::Sys {
        what,
        errno: errno(),
    }
}

/// The op a work completion failed on, for the error it maps to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FailedOp {
    pub wr: usize,
    pub addr: GlobalAddr,
    pub len: usize,
}

/// Maps a failed completion's status to the contract's error.
pub(crate) fn wc_error(status: sys::ibv_wc_status, op: FailedOp, node: NodeId) -> FabricError {
    let FailedOp { wr, addr, len } = op;
    match status {
        sys::IBV_WC_REM_ACCESS_ERR => FabricError::RemoteAccess { wr, addr, len },
        sys::IBV_WC_REM_INV_REQ_ERR => FabricError::RemoteInvalid {
            wr,
            addr,
            why: "the target refused the request (misaligned atomic, or a length it cannot take)",
        },
        sys::IBV_WC_REM_OP_ERR => FabricError::RemoteInvalid {
            wr,
            addr,
            why: "the target could not carry out the operation (remote operation error)",
        },
        sys::IBV_WC_REM_INV_RD_REQ_ERR => FabricError::RemoteInvalid {
            wr,
            addr,
            why: "the target refused the READ or atomic (no responder resources)",
        },
        sys::IBV_WC_LOC_LEN_ERR => FabricError::LocalLength { wr, len, max: len },
        sys::IBV_WC_WR_FLUSH_ERR => FabricError::Flushed,
        sys::IBV_WC_RNR_RETRY_EXC_ERR => FabricError::RnrRetryExceeded,
        sys::IBV_WC_RETRY_EXC_ERR | sys::IBV_WC_RESP_TIMEOUT_ERR => {
            FabricError::RetryExceeded { node }
        }
        sys::IBV_WC_LOC_PROT_ERR | sys::IBV_WC_LOC_ACCESS_ERR => FabricError::Unsupported {
            what: "local protection error: a local buffer outside its registration (remora bug)",
        },
        sys::IBV_WC_LOC_QP_OP_ERR => FabricError::Unsupported {
            what: "local queue-pair error: the work request exceeds the queue pair's limits",
        },
        _ => FabricError::Unsupported {
            what: "the device reported a fatal or unknown completion error",
        },
    }
}
