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

mod client;
mod wire;
pub use client::*;
pub use wire::Reply;
use wire::*;

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
