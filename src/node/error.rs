//! The one error type of the compute-node runtime and its handles.
use super::cores::CoreListError;
use remora_core::canrt::CanrtError;
use remora_core::catfish::{CatfishError, Rect};
use remora_core::erda::{ErdaConfigError, ErdaError};
use remora_core::fabric::FabricError;
use remora_core::sherman::ShermanError;
use remora_core::smart::SmartError;
use std::fmt;

/// What went wrong in the runtime or in an index operation. Index errors are wrapped as
/// they are ([`std::error::Error::source`] returns them); new variants may be added.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// SMART failed the operation.
    Smart(SmartError),
    /// Sherman failed the operation.
    Sherman(ShermanError),
    /// CANRT failed the operation.
    Canrt(CanrtError),
    /// Erda failed the operation.
    Erda(ErdaError),
    /// Catfish failed the operation.
    Catfish(CatfishError),
    /// A rectangle whose minimum exceeds its maximum on an axis.
    BadRect(Rect),
    /// The fabric failed outside an index operation (connecting a poller).
    Fabric(FabricError),
    /// The verbs fabric failed to connect a poller (feature `verbs`).
    #[cfg(feature = "verbs")]
    Verbs(crate::verbs::VerbsError),
    /// A bad core list.
    Cores(CoreListError),
    /// Reaching a memory node, or starting a thread, failed.
    Io {
        /// What was being done.
        what: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// An Erda geometry the in-process memory node cannot serve.
    ErdaConfig(ErdaConfigError),
    /// A key longer than the runtime's submission slots hold
    /// ([`crate::node::Builder::max_key`]).
    KeyTooLong {
        /// The key's length.
        len: usize,
        /// The longest key.
        max: usize,
    },
    /// A value longer than the runtime's submission slots hold
    /// ([`crate::node::Builder::max_value`]).
    ValueTooLong {
        /// The value's length.
        len: usize,
        /// The longest value.
        max: usize,
    },
    /// The index needs a service on its memory node that the memory node does not run.
    Service {
        /// The service the index needs.
        needs: &'static str,
        /// The service the memory node runs.
        serves: String,
    },
    /// Every index slot of the node is taken.
    TooManyIndexes {
        /// How many indexes one node can open.
        max: usize,
    },
    /// A setting the runtime cannot work with.
    Config(String),
    /// The compute node has shut down.
    Stopped,
    /// The poller running the operation panicked (a bug; the poller goes on).
    Panicked,
    /// The poller lost its connection to the memory nodes (its queue pair broke, or the
    /// node stopped answering) and could not connect again in `tries` attempts (backing
    /// off between them); `last` is why the last attempt failed. The next operation tries
    /// again.
    Reconnect {
        /// Connection attempts made.
        tries: u32,
        /// Why the last one failed.
        last: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Each index's error names its index itself ("smart: ...").
            Error::Smart(e) => write!(f, "{e}"),
            Error::Sherman(e) => write!(f, "{e}"),
            Error::Canrt(e) => write!(f, "{e}"),
            Error::Erda(e) => write!(f, "{e}"),
            Error::Catfish(e) => write!(f, "{e}"),
            Error::BadRect(r) => write!(
                f,
                "rectangle ({}, {})-({}, {}) has a minimum above its maximum",
                r.min_x, r.min_y, r.max_x, r.max_y
            ),
            Error::Fabric(e) => write!(f, "fabric: {e}"),
            #[cfg(feature = "verbs")]
            Error::Verbs(e) => write!(f, "verbs: {e}"),
            Error::Cores(e) => write!(f, "cores: {e}"),
            Error::Io { what, source } => write!(f, "{what}: {source}"),
            Error::ErdaConfig(e) => write!(f, "erda's memory node cannot start: {e}"),
            Error::KeyTooLong { len, max } => {
                write!(
                    f,
                    "a {len}-byte key, longer than the node's {max}-byte maximum"
                )
            }
            Error::ValueTooLong { len, max } => {
                write!(
                    f,
                    "a {len}-byte value, longer than the node's {max}-byte maximum"
                )
            }
            Error::Service { needs, serves } => write!(
                f,
                "the index needs the `{needs}` service on its memory node, which runs `{serves}` \
                 (start it with `remora memnode --service {needs}`)"
            ),
            Error::TooManyIndexes { max } => {
                write!(f, "a compute node opens at most {max} indexes")
            }
            Error::Config(why) => write!(f, "{why}"),
            Error::Stopped => write!(f, "the compute node has shut down"),
            Error::Panicked => write!(f, "the poller running this operation panicked"),
            Error::Reconnect { tries, last } => write!(
                f,
                "lost the connection to the memory node and {tries} reconnects failed (last: \
                 {last}); is the memory node up?"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Smart(e) => Some(e),
            Error::Sherman(e) => Some(e),
            Error::Canrt(e) => Some(e),
            Error::Erda(e) => Some(e),
            Error::Catfish(e) => Some(e),
            Error::Fabric(e) => Some(e),
            #[cfg(feature = "verbs")]
            Error::Verbs(e) => Some(e),
            Error::Cores(e) => Some(e),
            Error::Io { source, .. } => Some(source),
            Error::ErdaConfig(e) => Some(e),
            _ => None,
        }
    }
}

impl Error {
    /// Whether this error means the poller's connection is gone (its queue pair broke, the
    /// memory node stopped answering, or its region key was revoked): the poller then
    /// connects again before its next operation.
    pub(crate) fn is_connection_lost(&self) -> bool {
        let f = match self {
            Error::Fabric(f)
            | Error::Smart(SmartError::Fabric(f))
            | Error::Sherman(ShermanError::Fabric(f))
            | Error::Canrt(CanrtError::Fabric(f))
            | Error::Erda(ErdaError::Fabric(f))
            | Error::Catfish(CatfishError::Fabric(f)) => f,
            Error::Catfish(CatfishError::NoReply { .. }) => return true,
            _ => return false,
        };
        matches!(
            f,
            FabricError::Flushed
                | FabricError::RnrRetryExceeded
                | FabricError::RetryExceeded { .. }
                | FabricError::RemoteAccess { .. }
        )
    }
}

impl From<SmartError> for Error {
    fn from(e: SmartError) -> Error {
        Error::Smart(e)
    }
}
impl From<ShermanError> for Error {
    fn from(e: ShermanError) -> Error {
        Error::Sherman(e)
    }
}
impl From<CanrtError> for Error {
    fn from(e: CanrtError) -> Error {
        Error::Canrt(e)
    }
}
impl From<ErdaError> for Error {
    fn from(e: ErdaError) -> Error {
        Error::Erda(e)
    }
}
impl From<CatfishError> for Error {
    fn from(e: CatfishError) -> Error {
        Error::Catfish(e)
    }
}
impl From<CoreListError> for Error {
    fn from(e: CoreListError) -> Error {
        Error::Cores(e)
    }
}
