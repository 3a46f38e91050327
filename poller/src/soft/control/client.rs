//! The client side of the control socket: connecting (data and admin connections).

use super::*;

/// Opens a control connection with `key`, or else the key [`crate::soft::auth::client_key`]
/// finds for `path`.
pub(super) fn open(
    path: &Path,
    flags: u32,
    key: Option<crate::soft::auth::Key>,
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
        None => crate::soft::auth::client_key(path)?,
    };
    let flags = flags | if key.is_some() { FLAG_KEY } else { 0 };
    let mut hello = Vec::with_capacity(16 + crate::soft::auth::KEY_LEN);
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
/// [`crate::soft::auth::client_key`] finds, if any).
pub fn connect(path: &Path) -> io::Result<SoftQp> {
    connect_with_key(path, None)
}

/// Connects a queue pair to the memnode listening at `path`, sending `key` (or, if none,
/// the key [`crate::soft::auth::client_key`] finds).
pub fn connect_with_key(path: &Path, key: Option<crate::soft::auth::Key>) -> io::Result<SoftQp> {
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
    if r.slot as usize >= crate::soft::node::MAX_SLOTS {
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
