//! Thin owners of rdma_cm objects: event channels, ids, addresses.
use super::error::{VerbsError, errno, sys_err};
use super::sys;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

/// An rdma_cm event channel (owns its file descriptor).
pub(crate) struct Channel(*mut sys::rdma_event_channel);

/// One rdma_cm event, copied out and acknowledged.
/// The IB connection manager's reject reason when the peer's application called
/// `rdma_reject` (IBTA "consumer defined", 28); the manager's own rejects carry other reasons
/// (e.g. 10, a stale connection: a request from the same address and queue pair number as
/// one the peer still has in hand).
pub(crate) const REJ_CONSUMER_DEFINED: i32 = 28;

pub(crate) struct Event {
    pub kind: sys::rdma_cm_event_type,
    pub id: *mut sys::rdma_cm_id,
    pub private: Vec<u8>,
    /// The event's status: for `RDMA_CM_EVENT_REJECTED` on InfiniBand and RoCE, the
    /// connection manager's reject reason ([`REJ_CONSUMER_DEFINED`] when the peer's
    /// application rejected; another reason when the connection manager itself did).
    pub status: i32,
    pub initiator_depth: u8,
    pub responder_resources: u8,
}

impl Channel {
    pub fn new() -> Result<Channel, VerbsError> {
        // SAFETY: creates a new channel; checked for null.
        let ch = unsafe { sys::rdma_create_event_channel() };
        if ch.is_null() {
            let e = errno();
            return Err(match e {
                libc::ENODEV | libc::ENOENT | libc::ENOSYS => VerbsError::NoDevice,
                libc::EACCES | libc::EPERM => VerbsError::Permission {
                    device: "rdma_cm".into(),
                    path: "/dev/infiniband/rdma_cm".into(),
                    errno: e,
                },
                _ => VerbsError::Sys {
                    what: "rdma_create_event_channel",
                    errno: e,
                },
            });
        }
        Ok(Channel(ch))
    }

    pub fn raw(&self) -> *mut sys::rdma_event_channel {
        self.0
    }

    /// The next event, waiting at most `timeout` (`None` when none came in time).
    pub fn next(&self, timeout: Duration) -> Result<Option<Event>, VerbsError> {
        // SAFETY: the channel is live; its fd is valid for its lifetime.
        let fd = unsafe { (*self.0).fd };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            if errno() == libc::EINTR {
                return Ok(None);
            }
            return Err(sys_err("poll on the rdma_cm channel"));
        }
        if n == 0 {
            return Ok(None);
        }
        let mut ev: *mut sys::rdma_cm_event = std::ptr::null_mut();
        // SAFETY: the fd is readable, so this returns an event without blocking for long.
        if unsafe { sys::rdma_get_cm_event(self.0, &mut ev) } != 0 || ev.is_null() {
            return Err(sys_err("rdma_get_cm_event"));
        }
        // SAFETY: `ev` is a live event until acknowledged below; its private data (when any)
        // is `private_data_len` readable bytes owned by the event.
        let out = unsafe {
            let e = &*ev;
            let conn = e.param.conn;
            let private = if conn.private_data.is_null() || conn.private_data_len == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    conn.private_data_len as usize,
                )
                .to_vec()
            };
            Event {
                kind: e.event,
                id: e.id,
                private,
                status: e.status,
                initiator_depth: conn.initiator_depth,
                responder_resources: conn.responder_resources,
            }
        };
        // SAFETY: acknowledges the event once, after its last use.
        unsafe { sys::rdma_ack_cm_event(ev) };
        Ok(Some(out))
    }

    /// Waits for the next event up to `timeout` in total.
    pub fn wait(
        &self,
        timeout: Duration,
        addr: &str,
        stage: &'static str,
    ) -> Result<Event, VerbsError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Some(e) = self.next(left.min(Duration::from_millis(200)))? {
                return Ok(e);
            }
            if Instant::now() >= deadline {
                return Err(VerbsError::Timeout {
                    addr: addr.into(),
                    stage,
                    secs: timeout.as_secs(),
                });
            }
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: every id on this channel has been destroyed by its owner before (owners
        // hold their ids in fields declared before the channel).
        unsafe { sys::rdma_destroy_event_channel(self.0) };
    }
}

/// An rdma_cm id owned by this value.
pub(crate) struct CmId(pub *mut sys::rdma_cm_id);

impl CmId {
    pub fn new(ch: &Channel) -> Result<CmId, VerbsError> {
        let mut id = std::ptr::null_mut();
        // SAFETY: valid channel and out-parameter; the TCP port space gives RC semantics.
        if unsafe { sys::rdma_create_id(ch.raw(), &mut id, std::ptr::null_mut(), sys::RDMA_PS_TCP) }
            != 0
        {
            return Err(sys_err("rdma_create_id"));
        }
        Ok(CmId(id))
    }
}

/// Transport retries before a retry-exceeded completion. Not 7: Soft-RoCE (rxe) treats 7
/// as "retry forever", as the spec does only for receiver-not-ready retries.
pub(crate) const TRANSPORT_RETRIES: u8 = 6;

/// Local ACK timeout exponent for connected queue pairs: 4.096 us * 2^16 = 268 ms per try;
/// with 6 retries a dead peer is reported (retry exceeded) after about 2 s.
pub(crate) const ACK_TIMEOUT: u8 = 16;

/// Sets the ACK timeout the id's queue pair gets when it is connected, so that a dead peer
/// ends in a retry-exceeded completion instead of an endless wait (some transports default
/// to no timeout at all).
pub(crate) fn set_ack_timeout(id: *mut sys::rdma_cm_id) {
    let mut t = ACK_TIMEOUT;
    // SAFETY: a live id; the option value is one byte, as the call expects. Failure leaves
    // the transport's default, which is not worth failing the connection for.
    unsafe {
        sys::rdma_set_option(
            id,
            sys::RDMA_OPTION_ID as i32,
            sys::RDMA_OPTION_ID_ACK_TIMEOUT as i32,
            (&mut t as *mut u8).cast(),
            1,
        )
    };
}

impl Drop for CmId {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the id is owned here; its queue pair (if any) was destroyed by the
            // owner first, and every event of it was acknowledged when read.
            unsafe { sys::rdma_destroy_id(self.0) };
        }
    }
}

/// A socket address in the C layout rdma_cm takes.
pub(crate) struct SockAddr {
    storage: libc::sockaddr_storage,
}

impl SockAddr {
    pub fn parse(s: &str) -> Result<SockAddr, VerbsError> {
        let bad = |why: String| VerbsError::BadAddress {
            addr: s.into(),
            why,
        };
        let addr: SocketAddr = s
            .to_socket_addrs()
            .map_err(|e| bad(e.to_string()))?
            .next()
            .ok_or_else(|| bad("it resolves to no address".into()))?;
        // SAFETY: sockaddr_storage is plain data for which all-zero is a valid value.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
                unsafe {
                    std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin)
                };
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
                unsafe {
                    std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6)
                };
            }
        }
        Ok(SockAddr { storage })
    }

    pub fn as_ptr(&mut self) -> *mut sys::sockaddr {
        (&mut self.storage as *mut libc::sockaddr_storage).cast()
    }
}
