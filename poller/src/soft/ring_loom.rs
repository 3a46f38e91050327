//! Loom model of the receive ring: all interleavings of one producer and one consumer (and
//! the values their position loads may see), checking FIFO order and intact messages.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p remora-poller --lib --release ring`.
#![cfg(test)]

use super::ring::{Ring, RingMemory, ring_bytes};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::AtomicU64;
use loom::thread;
use remora_core::fabric::{Recv, RecvKind};
use std::sync::atomic::Ordering;

/// The ring's bytes for loom. Positions (`load`/`store`) are loom atomics. Slot bytes
/// (`read`/`write`) are loom cells, i.e. plain memory: loom reports any slot access that the
/// head/tail protocol does not order before a conflicting one. That is stricter than the
/// relaxed word copies of the real ring, on purpose: it is the property that makes those
/// copies see whole messages, and it also catches a slot reused while still being read, which
/// loom could not show with relaxed atomics (it does not model load buffering).
struct LoomMemory {
    positions: Vec<AtomicU64>,
    slots: Vec<UnsafeCell<u64>>,
}

impl LoomMemory {
    fn new(bytes: usize) -> LoomMemory {
        let words = bytes.div_ceil(8);
        LoomMemory {
            positions: (0..words).map(|_| AtomicU64::new(0)).collect(),
            slots: (0..words).map(|_| UnsafeCell::new(0)).collect(),
        }
    }
}

impl RingMemory for LoomMemory {
    unsafe fn load(&self, off: usize, order: Ordering) -> u64 {
        self.positions[off / 8].load(order)
    }

    unsafe fn store(&self, off: usize, value: u64, order: Ordering) {
        self.positions[off / 8].store(value, order)
    }

    unsafe fn read(&self, off: usize, dst: &mut [u8]) {
        let mut i = 0;
        while i < dst.len() {
            let at = off + i;
            let first = at % 8;
            let n = (8 - first).min(dst.len() - i);
            // SAFETY: loom checks that no write to this word races with the read.
            let w = self.slots[at / 8].with(|p| unsafe { *p }).to_le_bytes();
            dst[i..i + n].copy_from_slice(&w[first..first + n]);
            i += n;
        }
    }

    unsafe fn write(&self, off: usize, src: &[u8]) {
        let mut i = 0;
        while i < src.len() {
            let at = off + i;
            let first = at % 8;
            let n = (8 - first).min(src.len() - i);
            self.slots[at / 8].with_mut(|p| {
                // SAFETY: loom checks that no other access to this word races with the write.
                let mut w = unsafe { *p }.to_le_bytes();
                w[first..first + n].copy_from_slice(&src[i..i + n]);
                // SAFETY: as above.
                unsafe { *p = u64::from_le_bytes(w) };
            });
            i += n;
        }
    }
}

const MAX_MSG: usize = 16;

/// The messages pushed, in order: more than the ring's depth, so the producer finds the ring
/// full and later messages reuse earlier ones' slots.
fn message(n: usize) -> (RecvKind, u32, [u8; MAX_MSG]) {
    match n {
        1 => (RecvKind::WriteImm, 0x1d_0001, [0; MAX_MSG]),
        _ => (RecvKind::Send, 0, [n as u8 + 1; MAX_MSG]),
    }
}

const MESSAGES: usize = 3;

#[test]
fn fifo_intact_across_full_ring_and_wrap_depth_1() {
    loom::model(|| producer_and_consumer(1));
}

#[test]
fn fifo_intact_across_full_ring_and_wrap_depth_2() {
    loom::model(|| producer_and_consumer(2));
}

/// One execution: a producer pushes [`MESSAGES`] through a ring of `depth` slots, spinning
/// while it is full; the consumer pops them, checking order, headers and payloads.
fn producer_and_consumer(depth: usize) {
    let mem = LoomMemory::new(ring_bytes(depth, MAX_MSG));
    // SAFETY: `mem` has ring_bytes(depth, MAX_MSG) bytes and the ring owns it.
    let ring = Arc::new(unsafe { Ring::over(mem, depth, MAX_MSG) });
    let tx = ring.clone();
    let producer = thread::spawn(move || {
        for n in 0..MESSAGES {
            let (kind, imm, payload) = message(n);
            while !tx.try_push(kind, imm, &payload).expect("push") {
                thread::yield_now(); // full: receiver not ready
            }
        }
    });
    for n in 0..MESSAGES {
        let mut buf = [0u8; MAX_MSG];
        let got = loop {
            match ring.try_pop(&mut buf).expect("pop of a published message") {
                Some(r) => break r,
                None => thread::yield_now(),
            }
        };
        let (kind, imm, payload) = message(n);
        let want = Recv {
            kind,
            len: MAX_MSG as u32,
            imm: (kind == RecvKind::WriteImm).then_some(imm),
        };
        assert_eq!(got, want, "message {n}");
        if kind == RecvKind::Send {
            assert_eq!(buf, payload, "payload of message {n}");
        }
    }
    producer.join().expect("producer");
    let mut buf = [0u8; MAX_MSG];
    assert_eq!(ring.try_pop(&mut buf).expect("pop"), None, "nothing extra");
}
