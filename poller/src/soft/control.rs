//! The memory node's control endpoint: a Unix socket over which a client process receives
//! the node's shared memory (as memfds, by SCM_RIGHTS) and its own pair of message rings.
//!
//! Protocol (little-endian):
//! - client → node, 16 bytes: magic `b"REMORAH1"`, version u32, flags u32
//!   (bit 0: admin connection — no rings, commands follow; bit 1: a key follows), then the
//!   32-byte key if bit 1 is set. A node started with a key ([`ListenOptions::key`],
//!   [`super::auth`]) refuses a hello without it, or with another.
//! - node → client, 64 bytes ([`Reply`]) with, for a data connection, the fds
//!   region, control page, channel, and device memory if any; bytes 56..64 name the node's
//!   service (`echo`, `canrt`, `erda`, ...). Or a refusal: magic `b"REMORAX1"` and 56 bytes
//!   of reason, which the client reports as its error.
//! - admin commands, 8 bytes each: `b"REVOKE!!"` → `b"REVOKED!"` (the key was revoked).
//!   Only the node's owner (same user id, by `SO_PEERCRED`) or root may send them.
//!
//! Anything else is refused: the node logs why, closes that connection, and keeps serving.
//! Handshakes run concurrently, each on its own thread with a deadline of
//! [`HANDSHAKE_TIMEOUT`], at most [`MAX_HANDSHAKES`] at once (more are refused at once), so
//! silent peers cannot lock other clients out. Connections beyond the node's cap
//! ([`ListenOptions::max_connections`]) are refused with a reason. The socket is created with
//! mode 0600 unless [`ListenOptions::mode`] says otherwise, and `listen` never deletes
//! anything but a stale socket nobody answers on.
use super::node::{CTL_LEN, CTL_MAGIC, NodeMem, SoftMemoryNode};
use super::qp::{Channel, SoftEndpoint, SoftQp};
use crate::arena::Mapping;
use remora_layouts::NodeId;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// First 8 bytes of a client's hello (`b"REMORAH1"`, read as a little-endian word); a
/// connection that starts with anything else is refused.
pub const HELLO_MAGIC: u64 = u64::from_le_bytes(*b"REMORAH1");
pub(crate) const REPLY_MAGIC: u64 = u64::from_le_bytes(*b"REMORAR1");
pub(crate) const VERSION: u32 = 2;
/// Bytes of a reply (or refusal).
const REPLY_LEN: usize = 80;
const FLAG_ADMIN: u32 = 1;
const FLAG_KEY: u32 = 2;
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(1);
/// Handshakes in progress at once; more are refused straight away.
pub(crate) const MAX_HANDSHAKES: usize = 64;
/// Commands one admin connection may send, and how long it may stay.
const ADMIN_COMMANDS: usize = 64;
const ADMIN_DEADLINE: Duration = Duration::from_secs(10);
const REFUSE_MAGIC: u64 = u64::from_le_bytes(*b"REMORAX1");
/// How long a client waits for the node's answer to its hello.
pub(crate) const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
const REVOKE: &[u8; 8] = b"REVOKE!!";
const REVOKED: &[u8; 8] = b"REVOKED!";

/// What a memory node tells a connecting client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// The node's id, as queue pairs to it name it.
    pub node_id: NodeId,
    /// Descriptors sent with the reply (region, control page, channel, device memory if
    /// any); 0 on an admin connection. At most 4.
    pub n_fds: u32,
    /// Bytes of the host region, header included.
    pub region_len: u64,
    /// Bytes of device memory (0: none).
    pub dm_len: u64,
    /// The region key when the client connected: its queue pair works until the key is
    /// revoked.
    pub key: u64,
    /// Largest SEND payload in bytes (256..=1 MiB).
    pub max_msg: u32,
    /// Slots of each of the connection's two message rings (1..=65536).
    pub depth: u32,
    /// Bytes of the channel mapping holding both rings (checked against `depth` and
    /// `max_msg` by the client).
    pub chan_len: u64,
    /// The node's service name, zero-padded ASCII.
    pub service: [u8; 8],
    /// The connection's client slot and the slot word its queue pair must find (data
    /// connections; see `NodeMem::slot`).
    pub slot: u16,
    /// The value the client slot's word holds for this connection (see `slot`).
    pub slot_word: u64,
}

impl Reply {
    /// The service the node runs (`echo`, `canrt`, `erda`, ...).
    pub fn service_name(&self) -> &str {
        let n = self.service.iter().position(|&b| b == 0).unwrap_or(8);
        std::str::from_utf8(&self.service[..n]).unwrap_or("?")
    }

    fn encode(&self) -> [u8; REPLY_LEN] {
        let mut b = [0u8; REPLY_LEN];
        b[0..8].copy_from_slice(&REPLY_MAGIC.to_le_bytes());
        b[8..10].copy_from_slice(&self.node_id.to_le_bytes());
        b[12..16].copy_from_slice(&self.n_fds.to_le_bytes());
        b[16..24].copy_from_slice(&self.region_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.dm_len.to_le_bytes());
        b[32..40].copy_from_slice(&self.key.to_le_bytes());
        b[40..44].copy_from_slice(&self.max_msg.to_le_bytes());
        b[44..48].copy_from_slice(&self.depth.to_le_bytes());
        b[48..56].copy_from_slice(&self.chan_len.to_le_bytes());
        b[56..64].copy_from_slice(&self.service);
        b[64..66].copy_from_slice(&self.slot.to_le_bytes());
        b[72..80].copy_from_slice(&self.slot_word.to_le_bytes());
        b
    }

    fn decode(b: &[u8; REPLY_LEN]) -> io::Result<Reply> {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4"));
        if u64_at(0) == REFUSE_MAGIC {
            let n = b[8..64].iter().position(|&c| c == 0).unwrap_or(56);
            let why = String::from_utf8_lossy(&b[8..8 + n]);
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("the memory node refused the connection: {why}"),
            ));
        }
        if u64_at(0) != REPLY_MAGIC {
            return Err(bad(
                "memory node reply has a bad magic: not a remora memnode",
            ));
        }
        let r = Reply {
            node_id: u16::from_le_bytes([b[8], b[9]]),
            n_fds: u32_at(12),
            region_len: u64_at(16),
            dm_len: u64_at(24),
            key: u64_at(32),
            max_msg: u32_at(40),
            depth: u32_at(44),
            chan_len: u64_at(48),
            service: b[56..64].try_into().expect("8"),
            slot: u16::from_le_bytes([b[64], b[65]]),
            slot_word: u64_at(72),
        };
        if r.n_fds > 4
            || r.max_msg < 256
            || r.max_msg > 1 << 20
            || r.depth == 0
            || r.depth > 1 << 16
        {
            return Err(bad("memory node reply has out-of-range fields"));
        }
        Ok(r)
    }
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

fn send_with_fds(s: &UnixStream, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut _,
        iov_len: data.len(),
    };
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space;
        // SAFETY: msg_control points at `space` writable bytes, enough for one cmsg header
        // and the fds, as CMSG_SPACE computed.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as usize;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast(), fds.len());
        }
    }
    // SAFETY: msg describes live buffers for the duration of the call.
    let n = unsafe { libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != data.len() {
        return Err(bad("short write on the control socket"));
    }
    Ok(())
}

fn recv_with_fds(s: &UnixStream, data: &mut [u8], max_fds: usize) -> io::Result<Vec<OwnedFd>> {
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: pure size computation.
    let space = unsafe { libc::CMSG_SPACE((max_fds * 4) as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: zeroed msghdr is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: msg describes live, writable buffers for the duration of the call.
    let n = unsafe {
        libc::recvmsg(
            s.as_raw_fd(),
            &mut msg,
            libc::MSG_WAITALL | libc::MSG_CMSG_CLOEXEC,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control with well-formed cmsgs within msg_controllen;
    // the CMSG_* macros walk them without leaving that buffer.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let count = ((*c).cmsg_len - libc::CMSG_LEN(0) as usize) / 4;
                let p = libc::CMSG_DATA(c) as *const RawFd;
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(p.add(i).read_unaligned()));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if (n as usize) < data.len() {
        return Err(bad(
            "memory node closed the control connection during the handshake",
        ));
    }
    Ok(fds)
}

/// How a memory node listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenOptions {
    /// File mode of the socket (who may connect): 0o600 by default, the owner only.
    pub mode: u32,
    /// Data connections at most; more are refused with a reason.
    pub max_connections: usize,
    /// The secret every client must send (none: the socket's mode alone admits).
    pub key: Option<super::auth::Key>,
}

impl Default for ListenOptions {
    fn default() -> Self {
        ListenOptions {
            mode: 0o600,
            max_connections: 1024,
            key: None,
        }
    }
}

/// Accepts clients for `node` on a Unix socket until the handle is dropped.
pub struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
    /// The socket file's identity, so that drop removes only our own.
    ino: (u64, u64),
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if file_id(&self.path) == Some(self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Listener {
    /// The socket's path (removed when the listener is dropped, if it is still ours).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Makes `path` free for a new socket: nothing there, or a stale socket nobody answers on
/// (removed). Anything else — a live memnode's socket, a regular file, a directory — is an
/// error naming the path, and is left alone.
fn clear_path(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let shown = path.display();
    let md = match std::fs::symlink_metadata(path) {
        Ok(md) => md,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io::Error::new(e.kind(), format!("{shown}: {e}"))),
    };
    if md.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{shown} is a directory: --listen takes the path of a socket file to create"),
        ));
    }
    if !md.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{shown} exists and is not a socket: refusing to replace it"),
        ));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "a memory node is already listening on {shown}: stop it or choose another path"
            ),
        )),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => std::fs::remove_file(path)
            .map_err(|e| io::Error::new(e.kind(), format!("removing stale socket {shown}: {e}"))),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("{shown} is a socket that could not be checked ({e}): refusing to replace it"),
        )),
    }
}

/// Binds `path` with the default [`ListenOptions`]; see [`listen_with`].
pub fn listen(node: &Arc<SoftMemoryNode>, path: &Path) -> io::Result<Listener> {
    listen_with(node, path, ListenOptions::default())
}

/// Binds `path` (replacing only a stale socket), sets its mode, and accepts clients on a
/// background thread; each handshake runs on a thread of its own.
pub fn listen_with(
    node: &Arc<SoftMemoryNode>,
    path: &Path,
    opts: ListenOptions,
) -> io::Result<Listener> {
    use std::os::unix::fs::PermissionsExt;
    clear_path(path)?;
    // Bound, listening and chmod-ed under a temporary name first, then renamed into place:
    // whoever sees `path` appear (a script waiting for the memnode) can connect at once, and
    // never finds a socket with the wrong mode or one that refuses connections.
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    clear_path(&tmp)?;
    let listener = UnixListener::bind(&tmp)
        .map_err(|e| io::Error::new(e.kind(), format!("binding {}: {e}", path.display())))?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(opts.mode & 0o777))
        .map_err(|e| io::Error::new(e.kind(), format!("chmod {}: {e}", path.display())))
        .and_then(|()| {
            std::fs::rename(&tmp, path).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("placing the socket at {}: {e}", path.display()),
                )
            })
        });
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let ino = file_id(path).unwrap_or((0, 0));
    listener.set_nonblocking(true)?;
    let stop = Arc::new(AtomicBool::new(false));
    let (node, flag) = (node.clone(), stop.clone());
    let thread = std::thread::Builder::new()
        .name("remora-memnode-accept".into())
        .spawn(move || accept_loop(&node, &listener, &flag, opts))?;
    Ok(Listener {
        stop,
        thread: Some(thread),
        path: path.to_path_buf(),
        ino,
    })
}

fn accept_loop(
    node: &Arc<SoftMemoryNode>,
    listener: &UnixListener,
    stop: &AtomicBool,
    opts: ListenOptions,
) {
    let busy = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((s, _)) => {
                if busy.load(Ordering::Acquire) >= MAX_HANDSHAKES {
                    let why = format!("{MAX_HANDSHAKES} handshakes already in progress");
                    refuse(&s, &why);
                    node.log(format!("refused connection: {why}"));
                    continue;
                }
                busy.fetch_add(1, Ordering::AcqRel);
                let (n, b) = (node.clone(), busy.clone());
                let spawned = std::thread::Builder::new()
                    .name("remora-handshake".into())
                    .spawn(move || {
                        if let Err(e) = handshake(&n, s, opts) {
                            n.log(format!("refused connection: {e}"));
                        }
                        b.fetch_sub(1, Ordering::AcqRel);
                    });
                if let Err(e) = spawned {
                    busy.fetch_sub(1, Ordering::AcqRel);
                    node.log(format!("no thread for a handshake: {e}"));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => {
                node.log(format!("accept failed: {e}"));
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Tells a client why it is refused (best effort: it may be gone already).
fn refuse(s: &UnixStream, why: &str) {
    let mut b = [0u8; REPLY_LEN];
    b[..8].copy_from_slice(&REFUSE_MAGIC.to_le_bytes());
    let n = why.len().min(56);
    b[8..8 + n].copy_from_slice(&why.as_bytes()[..n]);
    let _ = s.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = (&*s).write_all(&b);
}

/// The user id of the process at the other end of `s`.
fn peer_uid(s: &UnixStream) -> io::Result<u32> {
    // SAFETY: ucred is plain data; zeroed is a valid value for getsockopt to overwrite.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len are live, writable, and len is cred's size.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

fn handshake(node: &Arc<SoftMemoryNode>, mut s: UnixStream, opts: ListenOptions) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    s.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut hello = [0u8; 16];
    s.read_exact(&mut hello)
        .map_err(|e| io::Error::new(e.kind(), format!("no hello: {e}")))?;
    let magic = u64::from_le_bytes(hello[0..8].try_into().expect("8"));
    let version = u32::from_le_bytes(hello[8..12].try_into().expect("4"));
    let flags = u32::from_le_bytes(hello[12..16].try_into().expect("4"));
    if magic != HELLO_MAGIC {
        return Err(bad(&format!(
            "bad hello magic {magic:#018x}: not a remora client"
        )));
    }
    if version != VERSION {
        let why = format!("client speaks protocol version {version}, this node {VERSION}");
        refuse(&s, &why);
        return Err(bad(&why));
    }
    let mut sent = [0u8; super::auth::KEY_LEN];
    if flags & FLAG_KEY != 0 {
        s.read_exact(&mut sent)
            .map_err(|e| io::Error::new(e.kind(), format!("no key after the hello: {e}")))?;
    }
    if let Some(key) = &opts.key {
        let why = if flags & FLAG_KEY == 0 {
            Some("this node needs a key (REMORA_KEY_FILE)")
        } else if !super::auth::same(key, &sent) {
            Some("wrong key")
        } else {
            None
        };
        if let Some(why) = why {
            refuse(&s, why);
            return Err(bad(&format!("refused a client: {why}")));
        }
    }
    let cfg = node.config();
    let mem = node.mem();
    let mut service = [0u8; 8];
    let name = node.service().as_bytes();
    service[..name.len().min(8)].copy_from_slice(&name[..name.len().min(8)]);
    let mut reply = Reply {
        node_id: cfg.node_id,
        n_fds: 0,
        region_len: cfg.region_len,
        dm_len: cfg.dm_len,
        key: mem.key().load(Ordering::Acquire),
        max_msg: cfg.max_msg as u32,
        depth: cfg.ring_depth as u32,
        chan_len: Channel::bytes(cfg.ring_depth, cfg.max_msg) as u64,
        service,
        slot: 0,
        slot_word: 0,
    };
    if flags & FLAG_ADMIN != 0 {
        return admin(node, s, &reply);
    }
    if node.connections() >= opts.max_connections {
        let why = format!("connection cap of {} reached", opts.max_connections);
        refuse(&s, &why);
        return Err(bad(&why));
    }
    let Some((slot, word)) = mem.alloc_slot() else {
        let why = "every client slot of the node is taken".to_string();
        refuse(&s, &why);
        return Err(bad(&why));
    };
    // Give the slot back if anything below fails.
    struct SlotGuard<'a>(&'a NodeMem, Option<u16>);
    impl Drop for SlotGuard<'_> {
        fn drop(&mut self) {
            if let Some(i) = self.1 {
                self.0.free_slot(i);
            }
        }
    }
    let mut guard = SlotGuard(mem, Some(slot));
    reply.slot = slot;
    reply.slot_word = word;
    let chan = Mapping::shared("remora-chan", reply.chan_len as usize)?;
    let chan = Arc::new(Channel {
        map: chan,
        depth: cfg.ring_depth,
        max_msg: cfg.max_msg,
    });
    let mut fds = vec![
        mem.region.fd().ok_or_else(|| bad("region has no fd"))?,
        mem.ctl.fd().ok_or_else(|| bad("control page has no fd"))?,
        chan.map.fd().ok_or_else(|| bad("channel has no fd"))?,
    ];
    if let Some(dm) = &mem.dm {
        fds.push(dm.fd().ok_or_else(|| bad("device memory has no fd"))?);
    }
    reply.n_fds = fds.len() as u32;
    send_with_fds(&s, &reply.encode(), &fds)?;
    s.set_read_timeout(None)?;
    guard.1 = None;
    node.adopt(SoftQp::server(chan, Some(s)), slot);
    node.log(format!(
        "client connected ({} connections)",
        node.connections()
    ));
    Ok(())
}

/// Serves an admin connection: only the node's owner or root, a few commands, a deadline.
fn admin(node: &Arc<SoftMemoryNode>, mut s: UnixStream, reply: &Reply) -> io::Result<()> {
    s.write_all(&reply.encode())?;
    let uid = peer_uid(&s)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let allowed = uid == me || uid == 0;
    let start = std::time::Instant::now();
    let mut cmd = [0u8; 8];
    for _ in 0..ADMIN_COMMANDS {
        if start.elapsed() > ADMIN_DEADLINE || s.read_exact(&mut cmd).is_err() {
            break;
        }
        if &cmd != REVOKE {
            return Err(bad("unknown admin command"));
        }
        if !allowed {
            let why =
                format!("uid {uid} may not revoke: only the memnode's owner (uid {me}) or root");
            refuse(&s, &why);
            return Err(bad(&why));
        }
        node.revoke_key();
        s.write_all(REVOKED)?;
    }
    Ok(())
}

/// Opens a control connection with `key`, or else the key [`super::auth::client_key`]
/// finds for `path`.
fn open(
    path: &Path,
    flags: u32,
    key: Option<super::auth::Key>,
) -> io::Result<(UnixStream, Reply, Vec<OwnedFd>)> {
    let s = UnixStream::connect(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "connecting to memnode at {}: {e} (is `remora memnode` running?)",
                path.display()
            ),
        )
    })?;
    s.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    s.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let key = match key {
        Some(k) => Some(k),
        None => super::auth::client_key(path)?,
    };
    let flags = flags | if key.is_some() { FLAG_KEY } else { 0 };
    let mut hello = Vec::with_capacity(16 + super::auth::KEY_LEN);
    hello.extend_from_slice(&HELLO_MAGIC.to_le_bytes());
    hello.extend_from_slice(&VERSION.to_le_bytes());
    hello.extend_from_slice(&flags.to_le_bytes());
    if let Some(k) = &key {
        hello.extend_from_slice(k);
    }
    let shown = path.display();
    let timed_out = |e: io::Error| {
        if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the memory node at {shown} did not answer within {} s (busy, hung, or not a \
                     remora memnode)",
                    CLIENT_TIMEOUT.as_secs()
                ),
            )
        } else {
            io::Error::new(e.kind(), format!("memory node at {shown}: {e}"))
        }
    };
    (&s).write_all(&hello).map_err(timed_out)?;
    let mut b = [0u8; REPLY_LEN];
    let fds = recv_with_fds(&s, &mut b, 4).map_err(timed_out)?;
    let reply = Reply::decode(&b).map_err(|e| io::Error::new(e.kind(), format!("{shown}: {e}")))?;
    if fds.len() != reply.n_fds as usize {
        return Err(bad(
            "memory node sent a different number of fds than it announced",
        ));
    }
    s.set_read_timeout(None)?;
    Ok((s, reply, fds))
}

/// Connects a queue pair to the memnode listening at `path` (with the key
/// [`super::auth::client_key`] finds, if any).
pub fn connect(path: &Path) -> io::Result<SoftQp> {
    connect_with_key(path, None)
}

/// Connects a queue pair to the memnode listening at `path`, sending `key` (or, if none,
/// the key [`super::auth::client_key`] finds).
pub fn connect_with_key(path: &Path, key: Option<super::auth::Key>) -> io::Result<SoftQp> {
    let (s, r, fds) = open(path, 0, key)?;
    if fds.len() < 3 {
        return Err(bad("memory node sent too few fds"));
    }
    let mut fds = fds.into_iter();
    let mut next = || fds.next().ok_or_else(|| bad("missing fd"));
    let region = Mapping::from_fd(next()?, r.region_len as usize)?;
    let ctl = Mapping::from_fd(next()?, CTL_LEN)?;
    let chan = Mapping::from_fd(next()?, r.chan_len as usize)?;
    if r.chan_len as usize != Channel::bytes(r.depth as usize, r.max_msg as usize) {
        return Err(bad("channel size does not match its ring geometry"));
    }
    let dm = if r.dm_len > 0 {
        Some(Mapping::from_fd(next()?, r.dm_len as usize)?)
    } else {
        None
    };
    let mem = NodeMem {
        node_id: r.node_id,
        region,
        // Client ends never persist: that is the memory node's CPU's business.
        durable: false,
        nvm_write_ns: 0,
        region_len: r.region_len,
        dm,
        dm_len: r.dm_len,
        ctl,
        nvm: Default::default(),
    };
    if mem.ctl_magic() != CTL_MAGIC {
        return Err(bad("memory node's control page has a bad magic"));
    }
    if r.slot as usize >= super::node::MAX_SLOTS {
        return Err(bad("memory node sent an out-of-range client slot"));
    }
    let chan = Arc::new(Channel {
        map: chan,
        depth: r.depth as usize,
        max_msg: r.max_msg as usize,
    });
    Ok(SoftQp::client(
        Arc::new(mem),
        chan,
        Some(s),
        (r.slot, r.slot_word),
    ))
}

/// Connects an endpoint to several memnodes, one queue pair each.
pub fn connect_all(paths: &[PathBuf]) -> io::Result<SoftEndpoint> {
    let qps = paths
        .iter()
        .map(|p| connect(p))
        .collect::<io::Result<Vec<_>>>()?;
    Ok(SoftEndpoint::new(qps))
}

/// Asks the memnode at `path` for its geometry without opening a data connection.
pub fn info(path: &Path) -> io::Result<Reply> {
    Ok(open(path, FLAG_ADMIN, None)?.1)
}

/// Asks the memnode at `path` to revoke its region key.
pub fn revoke(path: &Path) -> io::Result<()> {
    let (mut s, _, _) = open(path, FLAG_ADMIN, None)?;
    s.write_all(REVOKE)?;
    let mut b = [0u8; 8];
    s.read_exact(&mut b)?;
    if u64::from_le_bytes(b) == REFUSE_MAGIC {
        let mut why = [0u8; REPLY_LEN - 8];
        let _ = s.read_exact(&mut why);
        let n = why.iter().position(|&c| c == 0).unwrap_or(why.len());
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the memory node refused the revocation: {}",
                String::from_utf8_lossy(&why[..n])
            ),
        ));
    }
    if &b != REVOKED {
        return Err(bad("memory node did not confirm the revocation"));
    }
    Ok(())
}

/// The first 8 bytes of a memory node's last word on a data connection it ends (the reason
/// follows: 2 bytes of length, then that many bytes of UTF-8).
const FAREWELL_MAGIC: u64 = u64::from_le_bytes(*b"REMORAF1");
/// The longest reason a farewell carries.
const FAREWELL_MAX: usize = 240;

/// Tells the client at the other end of control socket `fd` why its connection ends (the
/// service refused what it sent: a geometry, a version), before its rings close. Best effort,
/// never blocks: the socket is idle after the handshake, so its buffer has room.
pub(crate) fn send_farewell(fd: &impl AsRawFd, why: &str) {
    // The longest prefix of at most FAREWELL_MAX bytes that ends on a char boundary
    // (`str::floor_char_boundary` is newer than the workspace's rust-version).
    let n = (0..=why.len().min(FAREWELL_MAX))
        .rev()
        .find(|&i| why.is_char_boundary(i))
        .unwrap_or(0);
    let mut b = Vec::with_capacity(10 + n);
    b.extend_from_slice(&FAREWELL_MAGIC.to_le_bytes());
    b.extend_from_slice(&(n as u16).to_le_bytes());
    b.extend_from_slice(&why.as_bytes()[..n]);
    // SAFETY: a non-blocking send of a buffer we own, on a descriptor we own; MSG_NOSIGNAL:
    // a client that already hung up is no reason to die of SIGPIPE.
    let _ = unsafe {
        libc::send(
            fd.as_raw_fd(),
            b.as_ptr().cast(),
            b.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
}

/// The reason a memory node gave for ending the connection of control socket `fd`, if it
/// sent one ([`send_farewell`]). Reasons are interned (a few distinct ones a process).
pub(crate) fn read_farewell(fd: &impl AsRawFd) -> Option<&'static str> {
    let mut b = [0u8; 10 + FAREWELL_MAX];
    // SAFETY: a non-blocking receive into a buffer we own, on a descriptor we own.
    let got = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            b.as_mut_ptr().cast(),
            b.len(),
            libc::MSG_DONTWAIT,
        )
    };
    let got = usize::try_from(got).ok()?;
    if got < 10 || u64::from_le_bytes(b[..8].try_into().ok()?) != FAREWELL_MAGIC {
        return None;
    }
    let n = u16::from_le_bytes([b[8], b[9]]) as usize;
    let why = std::str::from_utf8(b.get(10..10 + n.min(got - 10))?).ok()?;
    Some(intern(why))
}

/// A `'static` copy of `why`, made once per distinct reason (at most 64; past them, a fixed
/// text): a refusal becomes a [`remora_core::fabric::FabricError`], whose reasons are static.
fn intern(why: &str) -> &'static str {
    static SEEN: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let Ok(mut seen) = SEEN.lock() else {
        return "the memory node refused the connection (reason not kept)";
    };
    if let Some(s) = seen.iter().find(|s| **s == why) {
        return s;
    }
    if seen.len() >= 64 {
        return "the memory node refused the connection (too many distinct reasons to keep)";
    }
    let s: &'static str = Box::leak(why.to_owned().into_boxed_str());
    seen.push(s);
    s
}
