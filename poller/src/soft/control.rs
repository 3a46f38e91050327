//! The memory node's control endpoint: a Unix socket over which a client process receives
//! the node's shared memory (as memfds, by SCM_RIGHTS) and its own pair of message rings.
//!
//! Protocol (little-endian):
//! - client → node, 16 bytes: magic `b"REMORAH1"`, version u32 (1), flags u32
//!   (bit 0: admin connection — no rings, commands follow).
//! - node → client, 64 bytes ([`Reply`]) with, for a data connection, the fds
//!   region, control page, channel, and device memory if any.
//! - admin commands, 8 bytes each: `b"REVOKE!!"` → `b"REVOKED!"` (the key was revoked).
//!
//! Anything else is refused: the node logs why, closes that connection, and keeps serving.
//! A peer that says nothing is dropped after [`HANDSHAKE_TIMEOUT`].
use super::node::{CTL_LEN, CTL_MAGIC, NodeMem, SoftMemoryNode};
use super::qp::{Channel, SoftEndpoint, SoftQp};
use crate::arena::Mapping;
use remora_layouts::NodeId;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

pub const HELLO_MAGIC: u64 = u64::from_le_bytes(*b"REMORAH1");
pub const REPLY_MAGIC: u64 = u64::from_le_bytes(*b"REMORAR1");
pub const VERSION: u32 = 1;
const FLAG_ADMIN: u32 = 1;
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(1);
const REVOKE: &[u8; 8] = b"REVOKE!!";
const REVOKED: &[u8; 8] = b"REVOKED!";

/// What a memory node tells a connecting client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub node_id: NodeId,
    pub n_fds: u32,
    pub region_len: u64,
    pub dm_len: u64,
    pub key: u64,
    pub max_msg: u32,
    pub depth: u32,
    pub chan_len: u64,
}

impl Reply {
    fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(&REPLY_MAGIC.to_le_bytes());
        b[8..10].copy_from_slice(&self.node_id.to_le_bytes());
        b[12..16].copy_from_slice(&self.n_fds.to_le_bytes());
        b[16..24].copy_from_slice(&self.region_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.dm_len.to_le_bytes());
        b[32..40].copy_from_slice(&self.key.to_le_bytes());
        b[40..44].copy_from_slice(&self.max_msg.to_le_bytes());
        b[44..48].copy_from_slice(&self.depth.to_le_bytes());
        b[48..56].copy_from_slice(&self.chan_len.to_le_bytes());
        b
    }

    fn decode(b: &[u8; 64]) -> io::Result<Reply> {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4"));
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

/// Accepts clients for `node` on a Unix socket until the handle is dropped.
pub struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Listener {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Binds `path` (replacing a stale socket file) and accepts clients on a background thread.
pub fn listen(node: &Arc<SoftMemoryNode>, path: &Path) -> io::Result<Listener> {
    if path.exists() {
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)
        .map_err(|e| io::Error::new(e.kind(), format!("binding {}: {e}", path.display())))?;
    listener.set_nonblocking(true)?;
    let stop = Arc::new(AtomicBool::new(false));
    let (node, flag) = (node.clone(), stop.clone());
    let thread = std::thread::Builder::new()
        .name("remora-memnode-accept".into())
        .spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        if let Err(e) = handshake(&node, s) {
                            node.log(format!("refused connection: {e}"));
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(e) => {
                        node.log(format!("accept failed: {e}"));
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
        })?;
    Ok(Listener {
        stop,
        thread: Some(thread),
        path: path.to_path_buf(),
    })
}

fn handshake(node: &Arc<SoftMemoryNode>, mut s: UnixStream) -> io::Result<()> {
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
        return Err(bad(&format!(
            "client speaks protocol version {version}, this node {VERSION}"
        )));
    }
    let cfg = node.config();
    let mem = node.mem();
    let mut reply = Reply {
        node_id: cfg.node_id,
        n_fds: 0,
        region_len: cfg.region_len,
        dm_len: cfg.dm_len,
        key: mem.key().load(Ordering::Acquire),
        max_msg: cfg.max_msg as u32,
        depth: cfg.ring_depth as u32,
        chan_len: Channel::bytes(cfg.ring_depth, cfg.max_msg) as u64,
    };
    if flags & FLAG_ADMIN != 0 {
        s.write_all(&reply.encode())?;
        let mut cmd = [0u8; 8];
        while s.read_exact(&mut cmd).is_ok() {
            if &cmd != REVOKE {
                return Err(bad("unknown admin command"));
            }
            node.revoke_key();
            s.write_all(REVOKED)?;
        }
        return Ok(());
    }
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
    node.adopt(SoftQp::server(chan, Some(s)));
    node.log(format!(
        "client connected ({} connections)",
        node.connections()
    ));
    Ok(())
}

fn open(path: &Path, flags: u32) -> io::Result<(UnixStream, Reply, Vec<OwnedFd>)> {
    let s = UnixStream::connect(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "connecting to memnode at {}: {e} (is `remora memnode` running?)",
                path.display()
            ),
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut hello = [0u8; 16];
    hello[0..8].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
    hello[8..12].copy_from_slice(&VERSION.to_le_bytes());
    hello[12..16].copy_from_slice(&flags.to_le_bytes());
    (&s).write_all(&hello)?;
    let mut b = [0u8; 64];
    let fds = recv_with_fds(&s, &mut b, 4)?;
    let reply = Reply::decode(&b)?;
    if fds.len() != reply.n_fds as usize {
        return Err(bad(
            "memory node sent a different number of fds than it announced",
        ));
    }
    s.set_read_timeout(None)?;
    Ok((s, reply, fds))
}

/// Connects a queue pair to the memnode listening at `path`.
pub fn connect(path: &Path) -> io::Result<SoftQp> {
    let (s, r, fds) = open(path, 0)?;
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
        region_len: r.region_len,
        dm,
        dm_len: r.dm_len,
        ctl,
    };
    if mem.ctl_magic() != CTL_MAGIC {
        return Err(bad("memory node's control page has a bad magic"));
    }
    let chan = Arc::new(Channel {
        map: chan,
        depth: r.depth as usize,
        max_msg: r.max_msg as usize,
    });
    Ok(SoftQp::client(Arc::new(mem), chan, Some(s)))
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
    Ok(open(path, FLAG_ADMIN)?.1)
}

/// Asks the memnode at `path` to revoke its region key.
pub fn revoke(path: &Path) -> io::Result<()> {
    let (mut s, _, _) = open(path, FLAG_ADMIN)?;
    s.write_all(REVOKE)?;
    let mut b = [0u8; 8];
    s.read_exact(&mut b)?;
    if &b != REVOKED {
        return Err(bad("memory node did not confirm the revocation"));
    }
    Ok(())
}
