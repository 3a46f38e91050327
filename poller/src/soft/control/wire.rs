//! The control socket's wire format: the node's [`Reply`], and messages carrying file
//! descriptors (SCM_RIGHTS).

use super::*;

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

    pub(super) fn encode(&self) -> [u8; REPLY_LEN] {
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

    pub(super) fn decode(b: &[u8; REPLY_LEN]) -> io::Result<Reply> {
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

pub(super) fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

pub(super) fn send_with_fds(s: &UnixStream, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
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

pub(super) fn recv_with_fds(
    s: &UnixStream,
    data: &mut [u8],
    max_fds: usize,
) -> io::Result<Vec<OwnedFd>> {
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
