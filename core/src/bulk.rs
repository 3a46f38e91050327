//! Bulk loading's placement and writes: objects are carved from whole chunks exactly as
//! [`crate::alloc::RemoteAllocator::alloc`] carves them (size rounded up to a power of two,
//! aligned to it up to 64 bytes), but the chunk's image is built locally and reaches the
//! memory node in one large WRITE per chunk, so an index image is written at memory speed
//! rather than one verb per object.
//!
//! Everything goes through the fabric contract: a chunk is taken with the ordinary
//! FETCH_AND_ADD on the region header's `next_chunk` cursor (clients that come later allocate
//! after it), and its bytes travel in WRITEs. An object's address is known when it is
//! reserved, before its bytes are (a parent can name a child that is built after it, and a
//! child its parent); a chunk is written once it is full and every object reserved in it has
//! been filled. The indexes' bulk loaders (`sherman/bulk.rs`, `smart/bulk.rs`) build on this.
use crate::alloc::{AllocError, MIN_OBJECT};
use crate::fabric::{Endpoint, FabricError, QueuePair};
use remora_layouts::GlobalAddr;
use remora_layouts::region::{HEADER_LEN, NEXT_CHUNK_OFFSET, RegionHeader};
use std_alloc::vec;
use std_alloc::vec::Vec;

/// What warming a compute node's index cache after a bulk load read and kept (SMART's
/// `warm_cache`, Sherman's): the caches the clients' inserts of the same keys would have left.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WarmStats {
    /// Internal nodes (pages) read, the root included.
    pub read: u64,
    /// Nodes (pages) kept in the cache.
    pub cached: u64,
    /// Levels read whole (the root is level 0).
    pub levels: u32,
    /// Whether the cache's budget stopped the warm-up before the levels it caches ended.
    pub full: bool,
}

/// One chunk being built: its address, image, the bytes carved so far and the objects
/// reserved in it but not yet filled.
struct Chunk {
    base: GlobalAddr,
    img: Vec<u8>,
    used: usize,
    pending: usize,
}

/// Per memory node: the chunk objects are carved from, and full chunks still waiting for
/// objects reserved in them.
struct NodeChunks {
    chunk_size: u64,
    region_len: u64,
    open: Option<Chunk>,
    full: Vec<Chunk>,
}

/// Carves objects from chunks taken on the endpoint's memory nodes and writes each chunk
/// whole (see the module doc).
pub struct ChunkWriter {
    nodes: Vec<NodeChunks>,
    /// Bytes written so far.
    pub bytes: u64,
    /// Chunks taken from the memory nodes so far.
    pub chunks: u64,
}

/// The footprint and alignment the remote allocator gives an object of `size` bytes.
pub fn placement(size: u64) -> (u64, u64) {
    let rounded = size.max(MIN_OBJECT).next_power_of_two();
    (rounded, rounded.min(64))
}

impl ChunkWriter {
    /// Reads the region header of every memory node of `ep`.
    pub async fn new<E: Endpoint>(ep: &E) -> Result<ChunkWriter, AllocError> {
        let mut nodes = Vec::with_capacity(ep.nodes().len());
        for &n in ep.nodes() {
            let mut hb = [0u8; HEADER_LEN];
            ep.qp(n)?.read(GlobalAddr::new(n, 0), &mut hb).await?;
            let h = RegionHeader::decode(&hb).map_err(AllocError::BadHeader)?;
            nodes.push(NodeChunks {
                chunk_size: h.chunk_size,
                region_len: h.region_len,
                open: None,
                full: Vec::new(),
            });
        }
        Ok(ChunkWriter {
            nodes,
            bytes: 0,
            chunks: 0,
        })
    }

    /// Memory nodes (in `ep.nodes()` order).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Reserves `size` bytes on the memory node at position `ix` of the endpoint: the object
    /// must be [`Self::fill`]ed before [`Self::finish`].
    pub async fn reserve<E: Endpoint>(
        &mut self,
        ep: &E,
        ix: usize,
        size: u64,
    ) -> Result<GlobalAddr, AllocError> {
        let ix = ix % self.nodes.len();
        let node = ep.nodes()[ix];
        let n = &mut self.nodes[ix];
        if size > n.chunk_size {
            return Err(AllocError::TooLarge {
                size,
                chunk_size: n.chunk_size,
            });
        }
        let (rounded, align) = placement(size);
        let fits = n
            .open
            .as_ref()
            .is_some_and(|c| (c.used as u64).next_multiple_of(align) + rounded <= n.chunk_size);
        if !fits {
            if let Some(c) = n.open.take() {
                n.full.push(c);
            }
            let qp = ep.qp(node)?;
            let start = qp
                .faa(GlobalAddr::new(node, NEXT_CHUNK_OFFSET), n.chunk_size)
                .await?;
            if start
                .checked_add(n.chunk_size)
                .is_none_or(|e| e > n.region_len)
            {
                return Err(AllocError::OutOfMemory {
                    node,
                    region_len: n.region_len,
                });
            }
            self.chunks += 1;
            n.open = Some(Chunk {
                base: GlobalAddr::new(node, start),
                img: vec![0u8; n.chunk_size as usize],
                used: 0,
                pending: 0,
            });
            // Full chunks whose objects are all filled go out now.
            self.flush_done(ep, ix).await?;
        }
        let n = &mut self.nodes[ix];
        let c = n.open.as_mut().expect("a chunk was just opened");
        let at = (c.used as u64).next_multiple_of(align);
        c.used = (at + rounded) as usize;
        c.pending += 1;
        Ok(c.base.add(at))
    }

    /// Puts the bytes of an object reserved at `addr` (at most its reserved size).
    pub async fn fill<E: Endpoint>(
        &mut self,
        ep: &E,
        addr: GlobalAddr,
        bytes: &[u8],
    ) -> Result<(), AllocError> {
        let ix = ep
            .nodes()
            .iter()
            .position(|&n| n == addr.node())
            .ok_or(AllocError::Fabric(FabricError::UnknownNode {
                node: addr.node(),
            }))?;
        let n = &mut self.nodes[ix];
        let size = n.chunk_size;
        let inside =
            |c: &Chunk| addr.offset() >= c.base.offset() && addr.offset() < c.base.offset() + size;
        let c = match n.open.as_mut().filter(|c| inside(c)) {
            Some(c) => c,
            None => n
                .full
                .iter_mut()
                .find(|c| inside(c))
                .ok_or(AllocError::Fabric(FabricError::RemoteAccess {
                    wr: 0,
                    addr,
                    len: bytes.len(),
                }))?,
        };
        let at = (addr.offset() - c.base.offset()) as usize;
        c.img[at..at + bytes.len()].copy_from_slice(bytes);
        c.pending -= 1;
        if c.pending == 0 && !n.full.is_empty() {
            self.flush_done(ep, ix).await?;
        }
        Ok(())
    }

    /// Writes the full chunks of node `ix` that have no unfilled object.
    async fn flush_done<E: Endpoint>(&mut self, ep: &E, ix: usize) -> Result<(), AllocError> {
        let n = &mut self.nodes[ix];
        let mut i = 0;
        while i < n.full.len() {
            if n.full[i].pending == 0 {
                let c = n.full.swap_remove(i);
                ep.qp(c.base.node())?
                    .write(c.base, &c.img[..c.used])
                    .await?;
                self.bytes += c.used as u64;
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// Writes every chunk (each must have all its objects filled).
    pub async fn finish<E: Endpoint>(mut self, ep: &E) -> Result<u64, AllocError> {
        for ix in 0..self.nodes.len() {
            if let Some(c) = self.nodes[ix].open.take() {
                self.nodes[ix].full.push(c);
            }
            self.flush_done(ep, ix).await?;
            if let Some(c) = self.nodes[ix].full.first() {
                return Err(AllocError::Fabric(FabricError::RemoteAccess {
                    wr: 0,
                    addr: c.base,
                    len: c.pending,
                }));
            }
        }
        Ok(self.bytes)
    }
}
