//! Where a thread's coroutines live: the executor ([`crate::executor`]) places the futures it
//! runs in the thread's *frame memory* when one is installed, else on the heap.
//!
//! A fabric that needs registered memory (verbs) installs a mapping it has registered with
//! the NIC ([`install`]). Every buffer an index keeps across an `.await` (a READ's
//! destination, an atomic's result word) is then part of a coroutine's frame, inside
//! registered memory, and the NIC writes it in place: the papers' C++ gives each coroutine a
//! buffer in one registered region in the same way.
//!
//! Frames are taken and given back in stack order (a run's coroutines, then the coroutines
//! one of them joins). The stack holds its mapping through an [`Arc`], and every placed
//! future holds the stack, so the memory stays mapped as long as any future placed in it
//! lives, whoever installed it and whenever it is uninstalled.
use crate::arena::Mapping;
use std::alloc::Layout;
use std::cell::RefCell;
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A mapping handed out in stack order.
pub struct FrameStack {
    mem: Arc<Mapping>,
    /// Bytes in use from the start of the mapping.
    top: AtomicUsize,
}

impl FrameStack {
    /// A stack over all of `mem`.
    pub fn new(mem: Arc<Mapping>) -> Arc<FrameStack> {
        Arc::new(FrameStack {
            mem,
            top: AtomicUsize::new(0),
        })
    }

    /// The memory: (base, bytes).
    pub fn span(&self) -> (*mut u8, usize) {
        (self.mem.as_ptr(), self.mem.len())
    }

    /// Bytes in use.
    pub fn used(&self) -> usize {
        self.top.load(Ordering::Relaxed)
    }

    /// `layout` bytes on top of the stack: (pointer, the top to restore when freed).
    fn take(&self, layout: Layout) -> Option<(NonNull<u8>, usize)> {
        let base = self.mem.as_ptr() as usize;
        let mut top = self.top.load(Ordering::Relaxed);
        loop {
            let start = (base + top).next_multiple_of(layout.align()) - base;
            let end = start.checked_add(layout.size())?;
            if end > self.mem.len() {
                return None;
            }
            match self
                .top
                .compare_exchange(top, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                // SAFETY: start < len: inside the mapping.
                Ok(_) => {
                    return NonNull::new(unsafe { self.mem.as_ptr().add(start) }).map(|p| (p, top));
                }
                Err(t) => top = t,
            }
        }
    }

    /// Gives back the frame that ends at `end`, restoring `mark`, if it is the top one. A
    /// frame freed out of stack order is not given back (nor those below it): only wasteful,
    /// never unsound, and the executor's nesting never does it.
    fn give(&self, mark: usize, end: usize) {
        let _ = self
            .top
            .compare_exchange(end, mark, Ordering::Relaxed, Ordering::Relaxed);
    }
}

thread_local! {
    static FRAMES: RefCell<Option<Arc<FrameStack>>> = const { RefCell::new(None) };
}

/// Makes `stack` this thread's frame memory (replacing any other).
pub fn install(stack: Arc<FrameStack>) {
    FRAMES.with(|f| *f.borrow_mut() = Some(stack));
}

/// Removes `stack` as this thread's frame memory if it is the installed one. Futures placed
/// in it keep it mapped until they are dropped.
pub fn uninstall(stack: &Arc<FrameStack>) {
    let _ = FRAMES.try_with(|f| {
        let mut f = f.borrow_mut();
        if f.as_ref().is_some_and(|s| Arc::ptr_eq(s, stack)) {
            *f = None;
        }
    });
}

/// This thread's frame memory, if any.
pub fn installed() -> Option<Arc<FrameStack>> {
    FRAMES.try_with(|f| f.borrow().clone()).ok().flatten()
}

/// Futures pinned in frame memory when there is room in the thread's, else on the heap.
pub struct Frames<F> {
    ptr: NonNull<F>,
    len: usize,
    /// In frame memory: the stack, the top to restore and the frame's end.
    stack: Option<(Arc<FrameStack>, usize, usize)>,
}

impl<F> Frames<F> {
    /// Moves `items` into frame memory (or onto the heap); they are never moved again.
    pub fn new(items: Vec<F>) -> Frames<F> {
        let len = items.len();
        let layout = Layout::array::<F>(len).ok().filter(|l| l.size() > 0);
        if let (Some(layout), Some(stack)) = (layout, installed())
            && let Some((p, mark)) = stack.take(layout)
        {
            let ptr = p.cast::<F>();
            for (i, f) in items.into_iter().enumerate() {
                // SAFETY: the frame has room for `len` aligned values of F; slot i is written
                // once.
                unsafe { ptr.add(i).write(f) };
            }
            let end = p.as_ptr() as usize + layout.size() - stack.span().0 as usize;
            return Frames {
                ptr,
                len,
                stack: Some((stack, mark, end)),
            };
        }
        let b: Box<[F]> = items.into_boxed_slice();
        let ptr = NonNull::new(Box::into_raw(b).cast::<F>()).unwrap_or(NonNull::dangling());
        Frames {
            ptr,
            len,
            stack: None,
        }
    }

    /// How many futures.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when they live in frame memory.
    pub fn in_frame_memory(&self) -> bool {
        self.stack.is_some()
    }

    /// Future `i`, pinned.
    pub fn get(&mut self, i: usize) -> Pin<&mut F> {
        assert!(i < self.len, "frame index in range");
        // SAFETY: i < len; the values are never moved out of their place until dropped, and
        // `&mut self` makes this the only reference.
        unsafe { Pin::new_unchecked(&mut *self.ptr.as_ptr().add(i)) }
    }
}

impl<F> Drop for Frames<F> {
    fn drop(&mut self) {
        let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        match self.stack.take() {
            Some((stack, mark, end)) => {
                // SAFETY: the `len` values were written in `new` and are dropped once, in place.
                unsafe { std::ptr::drop_in_place(slice) };
                stack.give(mark, end);
            }
            // SAFETY: the slice came from `Box::into_raw` in `new`.
            None => drop(unsafe { Box::from_raw(slice) }),
        }
    }
}

// SAFETY: Frames owns its futures as a Box<[F]> would; the stack is Send + Sync.
unsafe impl<F: Send> Send for Frames<F> {}
// SAFETY: shared access gives no access to the futures (`get` takes `&mut self`).
unsafe impl<F: Sync> Sync for Frames<F> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_stack_in_the_installed_memory_and_fall_back_to_the_heap() {
        let mem = Arc::new(Mapping::anonymous(1 << 16).unwrap());
        let stack = FrameStack::new(mem);
        let heap = Frames::new(vec![1u64, 2]);
        assert!(!heap.in_frame_memory());
        install(stack.clone());
        let (base, len) = stack.span();
        let mut a = Frames::new(vec![[7u8; 100], [8u8; 100]]);
        assert!(a.in_frame_memory());
        let p = &*a.get(1) as *const [u8; 100] as usize;
        assert!(p >= base as usize && p + 100 <= base as usize + len);
        assert_eq!(*a.get(1), [8u8; 100]);
        let b = Frames::new(vec![3u64; 4]);
        assert!(b.in_frame_memory());
        let used = stack.used();
        assert!(used >= 232);
        let big = Frames::new(vec![[0u8; 1 << 16]]);
        assert!(!big.in_frame_memory(), "no room: on the heap");
        drop((big, b));
        assert!(stack.used() < used);
        drop(a);
        assert_eq!(stack.used(), 0, "given back in stack order");
        uninstall(&stack);
        assert!(installed().is_none());
        assert!(!Frames::new(vec![1u8]).in_frame_memory());
    }
}
