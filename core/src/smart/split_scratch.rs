//! Buffers the structural modifications of one handle reuse (`structure.rs`): a freeze's
//! CASes and their slot numbers, a swing's reverse-pointer writes, a leaf split's chain of
//! node images. Each is lent to one modification and comes back empty with its room, so a
//! grow, freeze, compaction or leaf split in steady state allocates nothing (issue 24; as
//! the scans' [`super::scan`] buffers). Kept on the heap, not in the coroutine's frame: a
//! freeze's batch holds up to 256 CASes, which as a fixed array would grow every frame
//! of an upsert or delete by kilobytes.
use crate::fabric::Op;
use core::cell::RefCell;
use core::mem::{ManuallyDrop, align_of, size_of};
use remora_layouts::GlobalAddr;
use std_alloc::vec::Vec;

/// Buffers of each kind kept for later modifications at most (more modifications at once
/// on one handle allocate).
const KEPT: usize = 64;

/// A write of a swing: where, what.
pub(crate) type Write<'a> = (GlobalAddr, &'a [u8]);

/// The buffers of one handle (see the module).
#[derive(Default)]
pub(crate) struct SplitScratch {
    ops: RefCell<Vec<Vec<Op<'static>>>>,
    slots: RefCell<Vec<Vec<usize>>>,
    writes: RefCell<Vec<Vec<Write<'static>>>>,
    images: RefCell<Vec<Vec<u8>>>,
}

/// Empties `v` and hands its allocation over as a vector of `U`, a type of the same size
/// and alignment as `T` (here: the same type with another lifetime). No value is
/// reinterpreted: the vector is empty.
fn recast<T, U>(mut v: Vec<T>) -> Vec<U> {
    const {
        assert!(size_of::<T>() == size_of::<U>() && align_of::<T>() == align_of::<U>());
    }
    v.clear();
    let mut v = ManuallyDrop::new(v);
    let (ptr, cap) = (v.as_mut_ptr(), v.capacity());
    // SAFETY: `ptr` and `cap` come from a live `Vec<T>` whose ownership moves here (it is
    // in `ManuallyDrop`, so it is never freed or used again); `U` has `T`'s size and
    // alignment (checked at compile time above), so the allocation has the layout a
    // `Vec<U>` of capacity `cap` frees with; length 0, so no `T` is read as a `U`. (A
    // dangling `ptr` of a never-allocated vector is also valid for a zero-capacity `U`.)
    unsafe { Vec::from_raw_parts(ptr.cast::<U>(), 0, cap) }
}

/// Takes one kept buffer from `pool`, or a new empty one.
fn take<T>(pool: &RefCell<Vec<Vec<T>>>) -> Vec<T> {
    pool.borrow_mut().pop().unwrap_or_default()
}

/// Keeps `v` (emptied) in `pool` for a later modification, unless `pool` holds `KEPT`.
fn keep<T>(pool: &RefCell<Vec<Vec<T>>>, mut v: Vec<T>) {
    v.clear();
    let mut p = pool.borrow_mut();
    if p.len() < KEPT {
        p.push(v);
    }
}

impl SplitScratch {
    /// An empty batch of work requests (a freeze's CASes).
    pub(crate) fn ops<'a>(&self) -> Vec<Op<'a>> {
        recast(take(&self.ops))
    }

    pub(crate) fn give_ops(&self, v: Vec<Op<'_>>) {
        keep(&self.ops, recast(v));
    }

    /// An empty list of slot numbers.
    pub(crate) fn slots(&self) -> Vec<usize> {
        take(&self.slots)
    }

    pub(crate) fn give_slots(&self, v: Vec<usize>) {
        keep(&self.slots, v);
    }

    /// An empty list of writes.
    pub(crate) fn writes<'a>(&self) -> Vec<Write<'a>> {
        recast(take(&self.writes))
    }

    pub(crate) fn give_writes(&self, v: Vec<Write<'_>>) {
        keep(&self.writes, recast(v));
    }

    /// `len` zero bytes.
    pub(crate) fn image(&self, len: usize) -> Vec<u8> {
        let mut v = take(&self.images);
        v.resize(len, 0);
        v
    }

    pub(crate) fn give_image(&self, v: Vec<u8>) {
        keep(&self.images, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_empty_with_their_room() {
        let s = SplitScratch::default();
        let mut olds = [0u64; 3];
        let mut ops = s.ops();
        for o in olds.iter_mut() {
            ops.push(Op::Cas {
                remote: GlobalAddr::NULL,
                compare: 0,
                swap: 1,
                old: o,
            });
        }
        let cap = ops.capacity();
        s.give_ops(ops);
        let again = s.ops();
        assert!(again.is_empty());
        assert_eq!(again.capacity(), cap);
        let w = [1u8; 4];
        let mut writes = s.writes();
        writes.push((GlobalAddr::NULL, &w[..]));
        let cap = writes.capacity();
        s.give_writes(writes);
        assert_eq!(s.writes().capacity(), cap);
        let mut img = s.image(96);
        img[5] = 7;
        s.give_image(img);
        let img = s.image(48);
        assert_eq!(img.len(), 48);
        assert!(img.iter().all(|&b| b == 0), "a lent image starts zeroed");
    }
}
