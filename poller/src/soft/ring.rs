//! A receive queue in shared memory: the soft fabric's SEND/RECV and WRITE_WITH_IMM path.
//!
//! One ring carries messages in one direction. Its `depth` slots are the receiver's posted
//! receives: a full ring is "receiver not ready". Layout (all little-endian, shared between
//! processes):
//!
//! | offset | what |
//! |---|---|
//! | 0   | tail: messages produced (AtomicU64, its own cache line) |
//! | 8   | closed: nonzero once either end hung up |
//! | 64  | head: messages consumed (AtomicU64, its own cache line) |
//! | 72  | waiting: nonzero while the consumer sleeps on tail's low half (a futex) |
//! | 128 | `depth` slots of [`slot_bytes`]: len u32, kind u32, imm u32, reserved u32, payload |
//!
//! Both sides learn `depth` and `max_msg` from the handshake; nothing read from the ring is
//! trusted (a corrupt position or header is an error, never an out-of-bounds access).
//!
//! The protocol is written against [`RingMemory`] so that it also runs on loom's atomics
//! (`ring_loom.rs`); the real rings use [`SharedMapping`], whose accessors inline to the
//! plain atomic loads and stores.
use super::words;
use remora_core::fabric::{FabricError, Recv, RecvKind};
use remora_layouts::GlobalAddr;
use std::sync::atomic::Ordering::{self, Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::fence;

const TAIL: usize = 0;
/// Nonzero once the receiving side has hung up (its service dropped the connection).
const CLOSED: usize = 8;
const HEAD: usize = 64;
/// Set by a consumer that sleeps until the tail moves (see [`Ring::sleep_until_pushed`]).
const WAITING: usize = 72;
const SLOTS: usize = 128;
const SLOT_HEADER: usize = 16;
const KIND_SEND: u32 = 1;
const KIND_IMM: u32 = 2;

/// Bytes of one slot for messages up to `max_msg` bytes.
pub const fn slot_bytes(max_msg: usize) -> usize {
    (SLOT_HEADER + max_msg).next_multiple_of(64)
}

/// Bytes of a ring of `depth` slots.
pub const fn ring_bytes(depth: usize, max_msg: usize) -> usize {
    SLOTS + depth * slot_bytes(max_msg)
}

/// The bytes a ring lives in, addressed by offset from the ring's start.
///
/// [`Ring`] only passes ranges inside its `ring_bytes(depth, max_msg)` bytes, and only
/// 8-byte-aligned offsets to [`load`](Self::load) and [`store`](Self::store); implementations
/// rely on that. Data moves word by word with relaxed atomics, as [`words`] does.
pub trait RingMemory {
    /// Loads the 8-byte word at `off`.
    ///
    /// # Safety
    /// `off` is a multiple of 8 and `off + 8` lies inside the ring.
    unsafe fn load(&self, off: usize, order: Ordering) -> u64;
    /// Stores the 8-byte word at `off`.
    ///
    /// # Safety
    /// As for [`load`](Self::load).
    unsafe fn store(&self, off: usize, value: u64, order: Ordering);
    /// Copies `dst.len()` bytes at `off` into `dst`.
    ///
    /// # Safety
    /// `off + dst.len()` lies inside the ring.
    unsafe fn read(&self, off: usize, dst: &mut [u8]);
    /// Copies `src` to the bytes at `off`.
    ///
    /// # Safety
    /// `off + src.len()` lies inside the ring.
    unsafe fn write(&self, off: usize, src: &[u8]);
}

/// A ring in a shared mapping (the real one): another process may access it concurrently.
pub struct SharedMapping {
    base: *mut u8,
}

impl RingMemory for SharedMapping {
    #[inline]
    unsafe fn load(&self, off: usize, order: Ordering) -> u64 {
        // SAFETY: `off` is aligned and inside the ring (the caller's contract), which lies in
        // a live mapping (Ring::new's contract).
        unsafe { words::word(self.base.add(off)) }.load(order)
    }

    #[inline]
    unsafe fn store(&self, off: usize, value: u64, order: Ordering) {
        // SAFETY: as in `load`.
        unsafe { words::word(self.base.add(off)) }.store(value, order)
    }

    #[inline]
    unsafe fn read(&self, off: usize, dst: &mut [u8]) {
        // SAFETY: the range lies inside the ring (the caller's contract), in a live mapping.
        unsafe { words::read(self.base.add(off), dst) }
    }

    #[inline]
    unsafe fn write(&self, off: usize, src: &[u8]) {
        // SAFETY: as in `read`.
        unsafe { words::write(self.base.add(off), src) }
    }
}

/// One end of a ring. The memory behind it must outlive it (the owner keeps it).
pub struct Ring<M: RingMemory = SharedMapping> {
    mem: M,
    depth: u64,
    max_msg: usize,
}

fn malformed(why: &'static str) -> FabricError {
    FabricError::RemoteInvalid {
        wr: 0,
        addr: GlobalAddr::NULL,
        why,
    }
}

impl Ring {
    /// # Safety
    /// `base .. base + ring_bytes(depth, max_msg)` must be a live, 8-byte-aligned shared
    /// mapping for the lifetime of the ring.
    pub unsafe fn new(base: *mut u8, depth: usize, max_msg: usize) -> Ring {
        // SAFETY: the mapping holds the ring's bytes (our contract).
        unsafe { Ring::over(SharedMapping { base }, depth, max_msg) }
    }
}

impl Ring {
    /// The low half of the tail position: what a sleeping consumer waits on.
    fn tail_word(&self) -> &std::sync::atomic::AtomicU32 {
        // SAFETY: TAIL is an 8-aligned offset inside the ring's live mapping (Ring::new's
        // contract); its low half (little-endian) changes with every push.
        unsafe { super::futex::word32(self.mem.base.add(TAIL)) }
    }

    /// The consumer's long wait: sleeps until the producer pushes (it wakes us, see
    /// [`Ring::wake_consumer`]), the ring closes, or `timeout` passes. Returns at once if a
    /// message is queued. Spurious returns are fine: the caller looks again.
    pub fn sleep_until_pushed(&self, timeout: std::time::Duration) {
        let tail = self.load_pos(TAIL, Acquire);
        self.store_pos(WAITING, 1, SeqCst);
        // Pairs with the producer's fence in `wake_consumer`: either it sees `waiting`, or we
        // see its tail.
        fence(SeqCst);
        if self.load_pos(TAIL, Acquire) == tail
            && self.load_pos(HEAD, Relaxed) == tail
            && !self.is_closed()
        {
            super::futex::wait(self.tail_word(), tail as u32, timeout);
        }
        self.store_pos(WAITING, 0, Relaxed);
    }

    /// After a push: wakes the consumer if it sleeps (a syscall only then).
    #[inline]
    pub fn wake_consumer(&self) {
        fence(SeqCst);
        if self.load_pos(WAITING, Relaxed) != 0 {
            super::futex::wake(self.tail_word());
        }
    }
}

impl<M: RingMemory> Ring<M> {
    /// True if a message waits to be taken.
    pub fn has_queued(&self) -> bool {
        self.load_pos(TAIL, Acquire) != self.load_pos(HEAD, Relaxed)
    }

    /// A ring of `depth` slots for messages up to `max_msg` bytes in `mem`.
    ///
    /// # Safety
    /// `mem` must be able to access `ring_bytes(depth, max_msg)` bytes (as [`RingMemory`]
    /// says) for the lifetime of the ring.
    pub unsafe fn over(mem: M, depth: usize, max_msg: usize) -> Ring<M> {
        Ring {
            mem,
            depth: depth as u64,
            max_msg,
        }
    }

    pub fn max_msg(&self) -> usize {
        self.max_msg
    }

    #[inline]
    fn load_pos(&self, at: usize, order: Ordering) -> u64 {
        // SAFETY: TAIL and HEAD are aligned offsets inside the ring.
        unsafe { self.mem.load(at, order) }
    }

    #[inline]
    fn store_pos(&self, at: usize, value: u64, order: Ordering) {
        // SAFETY: as in `load_pos`.
        unsafe { self.mem.store(at, value, order) }
    }

    /// Marks the ring as hung up by its receiver: senders get an error instead of waiting.
    pub fn close(&self) {
        self.store_pos(CLOSED, 1, Ordering::Release);
    }

    /// True once [`Ring::close`] was called on either end.
    pub fn is_closed(&self) -> bool {
        self.load_pos(CLOSED, Ordering::Acquire) != 0
    }

    /// The offset of the slot of message `n`: `slot_bytes(max_msg)` bytes inside the ring.
    fn slot(&self, n: u64) -> usize {
        let i = (n % self.depth) as usize;
        SLOTS + i * slot_bytes(self.max_msg)
    }

    /// Appends a SEND of `payload`, or a WRITE_WITH_IMM notice (`imm`, `payload.len()` bytes
    /// written, payload not copied). `Ok(false)`: the ring is full (receiver not ready).
    pub fn try_push(&self, kind: RecvKind, imm: u32, payload: &[u8]) -> Result<bool, FabricError> {
        self.push_raw(
            kind,
            imm,
            payload.len() as u32,
            if kind == RecvKind::Send { payload } else { &[] },
        )
    }

    /// A WRITE_WITH_IMM notice for `len` bytes written.
    pub fn try_push_imm(&self, imm: u32, len: u32) -> Result<bool, FabricError> {
        self.push_raw(RecvKind::WriteImm, imm, len, &[])
    }

    fn push_raw(
        &self,
        kind: RecvKind,
        imm: u32,
        len: u32,
        payload: &[u8],
    ) -> Result<bool, FabricError> {
        if payload.len() > self.max_msg {
            return Err(FabricError::LocalLength {
                wr: 0,
                len: payload.len(),
                max: self.max_msg,
            });
        }
        let tail = self.load_pos(TAIL, Relaxed);
        let head = self.load_pos(HEAD, Acquire);
        let used = tail.wrapping_sub(head);
        if used > self.depth {
            return Err(malformed("receive ring positions corrupt"));
        }
        if used == self.depth {
            return Ok(false);
        }
        let slot = self.slot(tail);
        let kind = match kind {
            RecvKind::Send => KIND_SEND,
            RecvKind::WriteImm => KIND_IMM,
        };
        let mut hdr = [0u8; SLOT_HEADER];
        hdr[0..4].copy_from_slice(&len.to_le_bytes());
        hdr[4..8].copy_from_slice(&kind.to_le_bytes());
        hdr[8..12].copy_from_slice(&imm.to_le_bytes());
        // SAFETY: the slot holds SLOT_HEADER + max_msg bytes and payload.len() <= max_msg;
        // the slot is free (used < depth), so the consumer does not read it now.
        unsafe {
            self.mem.write(slot, &hdr);
            if kind == KIND_SEND {
                self.mem.write(slot + SLOT_HEADER, payload);
            }
        }
        self.store_pos(TAIL, tail.wrapping_add(1), Release);
        Ok(true)
    }

    /// Takes the next message, copying a SEND's payload into `buf`.
    pub fn try_pop(&self, buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
        let head = self.load_pos(HEAD, Relaxed);
        let tail = self.load_pos(TAIL, Acquire);
        let ready = tail.wrapping_sub(head);
        if ready == 0 {
            return Ok(None);
        }
        if ready > self.depth {
            return Err(malformed("receive ring positions corrupt"));
        }
        let slot = self.slot(head);
        let mut hdr = [0u8; SLOT_HEADER];
        // SAFETY: the slot lies inside the ring and the producer no longer writes it.
        unsafe { self.mem.read(slot, &mut hdr) };
        let len = u32::from_le_bytes(hdr[0..4].try_into().expect("4 bytes"));
        let kind = u32::from_le_bytes(hdr[4..8].try_into().expect("4 bytes"));
        let imm = u32::from_le_bytes(hdr[8..12].try_into().expect("4 bytes"));
        let result = match kind {
            KIND_SEND if (len as usize) <= self.max_msg => {
                if len as usize > buf.len() {
                    Err(FabricError::LocalLength {
                        wr: 0,
                        len: len as usize,
                        max: buf.len(),
                    })
                } else {
                    // SAFETY: len <= max_msg, so the payload lies inside the slot.
                    unsafe { self.mem.read(slot + SLOT_HEADER, &mut buf[..len as usize]) };
                    Ok(Some(Recv {
                        kind: RecvKind::Send,
                        len,
                        imm: None,
                    }))
                }
            }
            KIND_IMM => Ok(Some(Recv {
                kind: RecvKind::WriteImm,
                len,
                imm: Some(imm),
            })),
            _ => Err(malformed("malformed message in receive ring")),
        };
        // The receive is consumed even when it failed, as a completion with an error is.
        self.store_pos(HEAD, head.wrapping_add(1), Release);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::Mapping;

    #[test]
    fn fifo_full_and_errors() {
        let m = Mapping::anonymous(ring_bytes(4, 64)).unwrap();
        // SAFETY: the mapping is large enough and outlives both ends.
        let (tx, rx) = unsafe { (Ring::new(m.as_ptr(), 4, 64), Ring::new(m.as_ptr(), 4, 64)) };
        for i in 0..4u8 {
            assert!(tx.try_push(RecvKind::Send, 0, &[i; 10]).unwrap());
        }
        assert!(
            !tx.try_push(RecvKind::Send, 0, &[9; 10]).unwrap(),
            "full ring must refuse"
        );
        let mut buf = [0u8; 64];
        let r = rx.try_pop(&mut buf).unwrap().unwrap();
        assert_eq!(
            (r.kind, r.len, &buf[..10]),
            (RecvKind::Send, 10, &[0u8; 10][..])
        );
        assert!(tx.try_push(RecvKind::WriteImm, 77, &[0; 30]).unwrap());
        for _ in 0..3 {
            rx.try_pop(&mut buf).unwrap().unwrap();
        }
        assert_eq!(rx.try_pop(&mut buf).unwrap().unwrap().imm, Some(77));
        assert_eq!(rx.try_pop(&mut buf).unwrap(), None);
        assert!(matches!(
            tx.try_push(RecvKind::Send, 0, &[0; 65]),
            Err(FabricError::LocalLength { .. })
        ));
        // a receive buffer too small: an error, and the message is consumed
        tx.try_push(RecvKind::Send, 0, &[1; 64]).unwrap();
        assert!(matches!(
            rx.try_pop(&mut buf[..8]),
            Err(FabricError::LocalLength { .. })
        ));
        assert_eq!(rx.try_pop(&mut buf).unwrap(), None);
    }

    #[test]
    fn corrupt_positions_and_headers_are_errors() {
        let m = Mapping::anonymous(ring_bytes(4, 64)).unwrap();
        // SAFETY: as above.
        let ring = unsafe { Ring::new(m.as_ptr(), 4, 64) };
        ring.store_pos(TAIL, 1000, Relaxed);
        let mut buf = [0u8; 64];
        assert!(ring.try_pop(&mut buf).is_err());
        assert!(ring.try_push(RecvKind::Send, 0, &[1]).is_err());
        ring.store_pos(TAIL, 1, Relaxed);
        ring.store_pos(HEAD, 0, Relaxed);
        // SAFETY: slot 0 header lies inside the mapping.
        unsafe { words::write(m.as_ptr().add(SLOTS), &[0xff; 16]) };
        assert!(
            ring.try_pop(&mut buf).is_err(),
            "garbage header must be an error"
        );
    }
}
