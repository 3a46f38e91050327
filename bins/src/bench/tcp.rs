//! Catfish's TCP/IP baseline (the paper's TCP/IP-1G and -40G lines): the same requests and
//! replies as fast messaging, over kernel TCP sockets instead of RDMA.
//!
//! - The server ([`TcpServer`], also `remora memnode --service catfish --tcp-listen ADDR`)
//!   keeps the tree in its own memory ([`HeapRegion`]) and runs the very handler the memory
//!   node runs ([`CatfishServer`]): one thread per accepted connection (the classic socket
//!   server), each with its own forked handler on the one shared tree (inserts under the
//!   writers' lock, searches lock-free; `remora_core::catfish::shared`). The whole region is
//!   the tree's single arena from the start: the region size bounds the tree.
//! - The client ([`TcpClient`]) sends each request and reads its replies, asking for the
//!   next window of a long reply with `More` as the RDMA client does (the handler's flow
//!   control stays on, with the largest window: TCP has its own).
//! - Framing: every message is a 4-byte little-endian length and its bytes; `TCP_NODELAY`.
use remora::core::catfish::{CatfishServer, Entry, Rect, Status};
use remora::core::fabric::{FabricError, Recv, RecvKind};
use remora::core::server::{Handler, LocalRegion, Replies, out_of_range};
use remora::layouts::catfish::{FLAG_LAST, FLAG_MORE, Opcode, Request, ResponseHeader, decode_hit};
use remora::layouts::region::HEADER_LEN;
use remora::layouts::{GlobalAddr, NodeId};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Largest message either side accepts (a reply of hits, a request).
pub const MAX_MESSAGE: usize = 4096;

/// A region in this process's memory, as the server CPU of a memory node sees its own:
/// 8-byte words, atomic each (searches on other threads race the writer, as one-sided
/// readers do on a memory node).
pub struct HeapRegion {
    words: Box<[AtomicU64]>,
    node: NodeId,
}

impl HeapRegion {
    pub fn new(bytes: u64, node: NodeId) -> HeapRegion {
        let n = bytes.div_ceil(8) as usize;
        HeapRegion {
            words: (0..n).map(|_| AtomicU64::new(0)).collect(),
            node,
        }
    }

    fn check(&self, offset: u64, len: usize) -> Result<(), FabricError> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(out_of_range(self.node, offset, len)),
        }
    }
}

impl LocalRegion for HeapRegion {
    fn node(&self) -> NodeId {
        self.node
    }
    fn len(&self) -> u64 {
        self.words.len() as u64 * 8
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        self.check(offset, buf.len())?;
        let mut at = offset;
        for b in buf.chunks_mut(8) {
            // A chunk may straddle two words when `offset` is not aligned: byte by byte then.
            for (k, byte) in b.iter_mut().enumerate() {
                let o = at + k as u64;
                let w = self.words[(o / 8) as usize].load(Ordering::Acquire);
                *byte = w.to_le_bytes()[(o % 8) as usize];
            }
            at += b.len() as u64;
        }
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        self.check(offset, data.len())?;
        for (k, byte) in data.iter().enumerate() {
            let o = offset + k as u64;
            let w = &self.words[(o / 8) as usize];
            let shift = (o % 8) * 8;
            // Only the handler's writer (under the tree's lock) stores: a plain update.
            let old = w.load(Ordering::Relaxed);
            let new = old & !(0xFF << shift) | u64::from(*byte) << shift;
            w.store(new, Ordering::Release);
        }
        Ok(())
    }
    fn load_u64(&self, offset: u64) -> Result<u64, FabricError> {
        self.word(offset).map(|w| w.load(Ordering::Acquire))
    }
    fn store_u64(&self, offset: u64, value: u64) -> Result<(), FabricError> {
        self.word(offset).map(|w| w.store(value, Ordering::Release))
    }
    fn cas_u64(&self, offset: u64, current: u64, new: u64) -> Result<u64, FabricError> {
        let w = self.word(offset)?;
        Ok(
            w.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
                .unwrap_or_else(|v| v),
        )
    }
}

impl HeapRegion {
    fn word(&self, offset: u64) -> Result<&AtomicU64, FabricError> {
        self.check(offset, 8)?;
        if !offset.is_multiple_of(8) {
            return Err(FabricError::RemoteInvalid {
                wr: 0,
                addr: GlobalAddr::new(self.node, offset),
                why: "misaligned word",
            });
        }
        Ok(&self.words[(offset / 8) as usize])
    }
}

fn read_frame(s: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<()> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a {n}-byte message; at most {MAX_MESSAGE}"),
        ));
    }
    buf.resize(n, 0);
    s.read_exact(buf)
}

fn put_frame(out: &mut Vec<u8>, msg: &[u8]) {
    out.extend_from_slice(&(msg.len() as u32).to_le_bytes());
    out.extend_from_slice(msg);
}

/// The TCP server: a listener thread and one thread per connection.
pub struct TcpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl TcpServer {
    /// Listens on `listen` (e.g. `127.0.0.1:0`) with a tree of `fanout` in a region of
    /// `region_bytes`, leaving at most `window` reply messages unread per client
    /// ([`MAX_WINDOW`] for a benchmark: TCP has its own flow control).
    pub fn start(
        listen: &str,
        region_bytes: u64,
        fanout: usize,
        window: usize,
    ) -> Result<TcpServer, String> {
        let region = Arc::new(HeapRegion::new(region_bytes, 0));
        let mut first = CatfishServer::new(MAX_MESSAGE).with_window(window);
        // The whole region past the header is the tree's one arena.
        let base = HEADER_LEN as u64;
        let init = Request {
            op: Opcode::Init,
            acked: 0,
            req_id: 1,
            rect: Rect::new(0, 0, 0, 0).map_err(|e| e.to_string())?,
            arg0: GlobalAddr::new(0, base).raw(),
            arg1: (region.len() - base) | (fanout as u64) << 48,
        };
        let mut replies = Replies::new();
        let recv = Recv {
            kind: RecvKind::Send,
            len: init.encode().len() as u32,
            imm: None,
        };
        first
            .on_message(&*region, usize::MAX, recv, &init.encode(), &mut replies)
            .map_err(|e| format!("formatting the tree: {e}"))?;
        let status = replies
            .iter()
            .next()
            .and_then(|m| ResponseHeader::decode(m).ok())
            .map(|h| h.status);
        if status != Some(Status::Ok) {
            return Err(format!(
                "formatting the tree: the server answered {status:?}"
            ));
        }
        first.on_disconnect(&*region, usize::MAX);
        let listener =
            TcpListener::bind(listen).map_err(|e| format!("listening on {listen}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("{addr}: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let acceptor = std::thread::Builder::new()
            .name("catfish-tcp-accept".into())
            .spawn(move || {
                let mut conn = 0usize;
                while !flag.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((s, _)) => {
                            let h = first.thread();
                            let (region, flag) = (region.clone(), flag.clone());
                            let _ = std::thread::Builder::new()
                                .name(format!("catfish-tcp-{conn}"))
                                .spawn(move || serve(s, conn, h, &region, &flag));
                            conn += 1;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(1))
                        }
                        Err(e) => eprintln!("catfish tcp: accept: {e}"),
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(TcpServer {
            addr,
            stop,
            acceptor: Some(acceptor),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

impl Drop for TcpServer {
    /// Stops accepting; connection threads end when their clients hang up (or within 100 ms
    /// of an idle read).
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// One connection's thread: every request to the handler, its replies back in one write.
fn serve(
    mut s: TcpStream,
    conn: usize,
    mut h: CatfishServer,
    region: &HeapRegion,
    stop: &AtomicBool,
) {
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
    let (mut msg, mut out, mut replies) = (Vec::new(), Vec::new(), Replies::new());
    loop {
        match read_frame(&mut s, &mut msg) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) && !stop.load(Ordering::Relaxed) =>
            {
                continue;
            }
            Err(_) => break,
        }
        replies.clear();
        let recv = Recv {
            kind: RecvKind::Send,
            len: msg.len() as u32,
            imm: None,
        };
        if h.on_message(region, conn, recv, &msg, &mut replies)
            .is_err()
        {
            break;
        }
        out.clear();
        for m in replies.iter() {
            put_frame(&mut out, m);
        }
        if s.write_all(&out).is_err() {
            break;
        }
    }
    h.on_disconnect(region, conn);
}

/// A Catfish client over TCP: inserts and searches, one request at a time.
pub struct TcpClient {
    s: TcpStream,
    next_req: u32,
    received: u8,
    msg: Vec<u8>,
    /// Bytes sent and received, frames included.
    pub bytes_out: u64,
    pub bytes_in: u64,
    /// Requests sent (a search of several windows sends several).
    pub requests: u64,
    /// Searches done.
    pub searches: u64,
}

impl TcpClient {
    pub fn connect(addr: &str) -> Result<TcpClient, String> {
        let s = TcpStream::connect(addr).map_err(|e| format!("connecting to {addr}: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(TcpClient {
            s,
            next_req: 1,
            received: 0,
            msg: Vec::with_capacity(MAX_MESSAGE),
            bytes_out: 0,
            bytes_in: 0,
            requests: 0,
            searches: 0,
        })
    }

    fn send(&mut self, mut req: Request) -> Result<(), String> {
        req.acked = self.received;
        let mut out = Vec::with_capacity(48);
        put_frame(&mut out, &req.encode());
        self.s
            .write_all(&out)
            .map_err(|e| format!("tcp send: {e}"))?;
        self.bytes_out += out.len() as u64;
        self.requests += 1;
        Ok(())
    }

    fn reply(&mut self, req_id: u32) -> Result<ResponseHeader, String> {
        read_frame(&mut self.s, &mut self.msg).map_err(|e| format!("tcp receive: {e}"))?;
        self.bytes_in += 4 + self.msg.len() as u64;
        self.received = self.received.wrapping_add(1);
        let h = ResponseHeader::decode(&self.msg).map_err(|e| format!("tcp reply: {e}"))?;
        if h.req_id != req_id {
            return Err("tcp reply to another request".into());
        }
        Ok(h)
    }

    fn request(&mut self, op: Opcode, rect: Rect, arg0: u64) -> Request {
        let req_id = self.next_req;
        self.next_req = self.next_req.wrapping_add(1).max(1);
        Request {
            op,
            acked: 0,
            req_id,
            rect,
            arg0,
            arg1: 0,
        }
    }

    pub fn insert(&mut self, rect: Rect, id: u64) -> Result<(), String> {
        let req = self.request(Opcode::Insert, rect, id);
        self.send(req)?;
        match self.reply(req.req_id)?.status {
            Status::Ok => Ok(()),
            s => Err(format!(
                "catfish tcp: the server answered {s:?} to an insert"
            )),
        }
    }

    /// Appends every entry intersecting `rect` to `out`.
    pub fn search(&mut self, rect: Rect, out: &mut Vec<Entry>) -> Result<(), String> {
        let req = self.request(Opcode::Search, rect, 0);
        self.send(req)?;
        loop {
            let h = self.reply(req.req_id)?;
            if h.status != Status::Ok {
                return Err(format!("catfish tcp: the server answered {:?}", h.status));
            }
            for i in 0..h.count as usize {
                out.push(decode_hit(&self.msg, i).map_err(|e| format!("tcp reply: {e}"))?);
            }
            if h.flags & FLAG_LAST != 0 {
                self.searches += 1;
                return Ok(());
            }
            if h.flags & FLAG_MORE != 0 {
                self.send(Request {
                    op: Opcode::More,
                    ..req
                })?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_searches_see_every_insert_and_long_replies_come_whole() {
        // A window of 2 messages: the 3000 hits (18 messages) need `More` 8 times.
        let server = TcpServer::start("127.0.0.1:0", 8 << 20, 16, 2).unwrap();
        let addr = server.addr().to_string();
        let mut c = TcpClient::connect(&addr).unwrap();
        for i in 0..3000u64 {
            let x = (i * 37 % 10_000) as i32;
            c.insert(Rect::new(x, x, x + 5, x + 5).unwrap(), i).unwrap();
        }
        let mut hits = Vec::new();
        let all = Rect::new(i32::MIN, i32::MIN, i32::MAX, i32::MAX).unwrap();
        c.search(all, &mut hits).unwrap();
        let mut ids: Vec<u64> = hits.iter().map(|e| e.ptr).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..3000).collect::<Vec<_>>());
        assert!(c.requests > 3000 + 8, "{} requests", c.requests);
        // A second connection sees the same tree, and a small window finds what it should.
        let mut d = TcpClient::connect(&addr).unwrap();
        hits.clear();
        d.search(Rect::new(0, 0, 40, 40).unwrap(), &mut hits)
            .unwrap();
        let want = (0..3000u64).filter(|i| i * 37 % 10_000 <= 40).count();
        assert_eq!(hits.len(), want);
        assert!(
            d.insert(
                Rect {
                    min_x: 5,
                    min_y: 0,
                    max_x: 1,
                    max_y: 0
                },
                1
            )
            .is_err()
        );
    }

    #[test]
    fn heap_region_words_and_bytes_agree_and_bounds_hold() {
        let r = HeapRegion::new(64, 3);
        r.write(3, &[1, 2, 3, 4, 5, 6, 7]).unwrap();
        let mut b = [0u8; 9];
        r.read(2, &mut b).unwrap();
        assert_eq!(b, [0, 1, 2, 3, 4, 5, 6, 7, 0]);
        r.store_u64(8, 7).unwrap();
        assert_eq!(r.cas_u64(8, 7, 9).unwrap(), 7);
        assert_eq!(r.load_u64(8).unwrap(), 9);
        assert!(r.read(60, &mut b).is_err());
        assert!(r.load_u64(4).is_err());
    }
}
