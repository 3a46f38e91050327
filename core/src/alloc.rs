//! The remote allocator client.
//!
//! Memory nodes hand out fixed-size chunks without using their CPU: a client FETCH_AND_ADDs
//! `chunk_size` to the `next_chunk` cursor of the region header (see
//! [`remora_layouts::region`]) and owns the chunk it got. Objects are carved from the chunk
//! locally; freed objects go to a local free list per size class and are reused by this
//! client. Every index allocates through this type.
use crate::fabric::{FabricError, QueuePair};
use core::cell::{Cell, RefCell};
use core::fmt;
use remora_layouts::region::{HEADER_LEN, NEXT_CHUNK_OFFSET, RegionHeader};
use remora_layouts::{GlobalAddr, LayoutError, NodeId};

/// Smallest object handed out; sizes round up to a power of two from here.
pub const MIN_OBJECT: u64 = 16;
const CLASSES: usize = 24;
const FREE_PER_CLASS: usize = 64;

/// Errors of the remote allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocError {
    /// The fabric failed the FETCH_AND_ADD or READ.
    Fabric(FabricError),
    /// The region header did not decode: not a remora memory node, or corrupt.
    BadHeader(LayoutError),
    /// The memory node has no chunk left.
    OutOfMemory {
        /// The memory node.
        node: NodeId,
        /// Bytes of its region.
        region_len: u64,
    },
    /// An object larger than one chunk.
    TooLarge {
        /// Bytes asked for.
        size: u64,
        /// Bytes of a chunk, the most one object can take.
        chunk_size: u64,
    },
}

impl From<FabricError> for AllocError {
    fn from(e: FabricError) -> Self {
        AllocError::Fabric(e)
    }
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::Fabric(e) => write!(f, "allocator: {e}"),
            AllocError::BadHeader(e) => write!(f, "allocator: region header unreadable: {e}"),
            AllocError::OutOfMemory { node, region_len } => {
                write!(f, "memory node {node} is full ({region_len} bytes region)")
            }
            AllocError::TooLarge { size, chunk_size } => {
                write!(
                    f,
                    "object of {size} bytes exceeds the chunk size {chunk_size}"
                )
            }
        }
    }
}

impl core::error::Error for AllocError {}

/// Allocates objects on one memory node.
pub struct RemoteAllocator {
    node: NodeId,
    chunk_size: u64,
    region_len: u64,
    cursor: Cell<u64>,
    end: Cell<u64>,
    free: RefCell<[heapless::Vec<u64, FREE_PER_CLASS>; CLASSES]>,
    chunks: Cell<u64>,
    carved: Cell<u64>,
}

fn class_of(size: u64) -> (usize, u64) {
    let rounded = size.max(MIN_OBJECT).next_power_of_two();
    (
        (rounded.trailing_zeros() - MIN_OBJECT.trailing_zeros()) as usize,
        rounded,
    )
}

impl RemoteAllocator {
    /// Reads and checks the region header of `qp`'s memory node.
    pub async fn open<Q: QueuePair>(qp: &Q) -> Result<RemoteAllocator, AllocError> {
        let mut buf = [0u8; HEADER_LEN];
        qp.read(GlobalAddr::new(qp.peer(), 0), &mut buf).await?;
        let h = RegionHeader::decode(&buf).map_err(AllocError::BadHeader)?;
        Ok(RemoteAllocator {
            node: qp.peer(),
            chunk_size: h.chunk_size,
            region_len: h.region_len,
            cursor: Cell::new(0),
            end: Cell::new(0),
            free: RefCell::new(core::array::from_fn(|_| heapless::Vec::new())),
            chunks: Cell::new(0),
            carved: Cell::new(0),
        })
    }

    /// The memory node this allocator carves from.
    pub fn node(&self) -> NodeId {
        self.node
    }
    /// Bytes of each chunk taken from the memory node (as its region header says).
    pub fn chunk_size(&self) -> u64 {
        self.chunk_size
    }
    /// Chunks this client has taken from the node.
    pub fn chunks_taken(&self) -> u64 {
        self.chunks.get()
    }

    /// Bytes of objects carved from chunks so far (sizes rounded up; objects reused from
    /// the free list not counted again): what this client's objects took from the region.
    pub fn bytes_carved(&self) -> u64 {
        self.carved.get()
    }

    /// Takes a whole chunk from the memory node (one FETCH_AND_ADD).
    pub async fn alloc_chunk<Q: QueuePair>(&self, qp: &Q) -> Result<GlobalAddr, AllocError> {
        let cursor = GlobalAddr::new(self.node, NEXT_CHUNK_OFFSET);
        let start = qp.faa(cursor, self.chunk_size).await?;
        match start.checked_add(self.chunk_size) {
            Some(end) if end <= self.region_len => {
                self.chunks.set(self.chunks.get() + 1);
                Ok(GlobalAddr::new(self.node, start))
            }
            _ => Err(AllocError::OutOfMemory {
                node: self.node,
                region_len: self.region_len,
            }),
        }
    }

    /// Allocates `size` bytes (rounded up to a power of two, aligned to it up to 64).
    pub async fn alloc<Q: QueuePair>(&self, qp: &Q, size: u64) -> Result<GlobalAddr, AllocError> {
        if size > self.chunk_size {
            return Err(AllocError::TooLarge {
                size,
                chunk_size: self.chunk_size,
            });
        }
        let (class, rounded) = class_of(size);
        if let Some(off) = self.free.borrow_mut()[class].pop() {
            return Ok(GlobalAddr::new(self.node, off));
        }
        let align = rounded.min(64);
        let mut at = self.cursor.get().next_multiple_of(align);
        if self.cursor.get() == 0 || at + rounded > self.end.get() {
            let chunk = self.alloc_chunk(qp).await?;
            at = chunk.offset();
            self.end.set(at + self.chunk_size);
        }
        self.cursor.set(at + rounded);
        self.carved.set(self.carved.get() + rounded);
        Ok(GlobalAddr::new(self.node, at))
    }

    /// Returns an object for reuse by this client. The caller guarantees no one else still
    /// reaches it (indexes free only what they unlinked and quiesced).
    pub fn free(&self, addr: GlobalAddr, size: u64) {
        let (class, _) = class_of(size);
        // A full free list drops the object: bounded memory beats reuse.
        let _ = self.free.borrow_mut()[class].push(addr.offset());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes() {
        assert_eq!(class_of(1), (0, 16));
        assert_eq!(class_of(16), (0, 16));
        assert_eq!(class_of(17), (1, 32));
        assert_eq!(class_of(1024), (6, 1024));
    }
}
