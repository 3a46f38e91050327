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
//!
//! **Sizing.** A spawn's frame is `Layout::array::<F>(n)`: the coroutine count times the
//! future's size, known when the coroutines are placed. Frame memory installed with
//! [`install_growable`] that is too small for a spawn while nothing lives in it is replaced,
//! at that spawn, by a mapping sized for it (rounded up to [`GROW_UNIT`]); the fabric
//! registers the new mapping at its first post from it (verbs: one `ibv_reg_mr` per queue
//! pair, then in place), so the coroutines' loops allocate nothing and make no system call.
//! **Fallback** (documented, counted): when the installed memory cannot take a spawn (it
//! was installed with [`install`], frames of an enclosing spawn still live in it, or the
//! new mapping could not be made), the futures go on the heap, outside registered memory:
//! what they READ is bounced through the fabric's staging (counted there), and
//! [`HEAP_FALLBACK_BYTES`] counts their bytes.
use crate::arena::Mapping;
use std::alloc::Layout;
use std::cell::RefCell;
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Bytes of futures placed on the heap while frame memory was installed, because it had no
/// room (see the module docs' fallback), in this process.
pub static HEAP_FALLBACK_BYTES: AtomicU64 = AtomicU64::new(0);

/// Frame memories replaced by bigger ones at a spawn (see [`install_growable`]), in this
/// process.
pub static GROWN: AtomicU64 = AtomicU64::new(0);

/// What a grown frame memory is rounded up to: one 2 MiB hugepage.
pub const GROW_UNIT: usize = 2 << 20;

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

/// A thread's frame memory: the stack in use, the one installed (what [`uninstall`] names),
/// and whether a spawn may replace it by a bigger one.
struct Installed {
    stack: Arc<FrameStack>,
    origin: Arc<FrameStack>,
    grow: bool,
}

thread_local! {
    static FRAMES: RefCell<Option<Installed>> = const { RefCell::new(None) };
}

/// Makes `stack` this thread's frame memory (replacing any other), of a fixed size.
pub fn install(stack: Arc<FrameStack>) {
    put(stack, false);
}

/// As [`install`], and a spawn it is too small for while nothing lives in it replaces it by
/// a mapping sized for that spawn (see the module docs): for a fabric that registers the
/// installed memory when it first meets it ([`installed_span`]).
pub fn install_growable(stack: Arc<FrameStack>) {
    put(stack, true);
}

fn put(stack: Arc<FrameStack>, grow: bool) {
    FRAMES.with(|f| {
        *f.borrow_mut() = Some(Installed {
            stack: stack.clone(),
            origin: stack,
            grow,
        })
    });
}

/// Removes `stack` as this thread's frame memory if it is the installed one (or the one a
/// bigger one replaced). Futures placed in it keep it mapped until they are dropped.
pub fn uninstall(stack: &Arc<FrameStack>) {
    let _ = FRAMES.try_with(|f| {
        let mut f = f.borrow_mut();
        if f.as_ref().is_some_and(|s| Arc::ptr_eq(&s.origin, stack)) {
            *f = None;
        }
    });
}

/// This thread's frame memory, if any.
pub fn installed() -> Option<Arc<FrameStack>> {
    FRAMES
        .try_with(|f| f.borrow().as_ref().map(|s| s.stack.clone()))
        .ok()
        .flatten()
}

/// This thread's frame memory's (base, bytes), if any, without taking a reference.
pub fn installed_span() -> Option<(*mut u8, usize)> {
    FRAMES
        .try_with(|f| f.borrow().as_ref().map(|s| s.stack.span()))
        .ok()
        .flatten()
}

/// Where a spawn's frame goes.
enum Room {
    /// No frame memory is installed.
    None,
    /// The installed one has no room (and may not grow).
    Full,
    /// At this pointer of this stack, over this mark.
    At(Arc<FrameStack>, NonNull<u8>, usize),
}

/// A frame of `layout` in this thread's frame memory (grown for it when allowed).
fn room_for(layout: Layout) -> Room {
    FRAMES
        .try_with(|f| {
            let mut f = f.borrow_mut();
            let Some(inst) = f.as_mut() else {
                return Room::None;
            };
            if let Some((p, mark)) = inst.stack.take(layout) {
                return Room::At(inst.stack.clone(), p, mark);
            }
            if !inst.grow || inst.stack.used() != 0 {
                return Room::Full;
            }
            let bytes = layout
                .size()
                .checked_add(layout.align())
                .map(|b| b.next_multiple_of(GROW_UNIT));
            let Some(mem) = bytes.and_then(|b| Mapping::anonymous(b).ok()) else {
                return Room::Full;
            };
            let stack = FrameStack::new(Arc::new(mem));
            let Some((p, mark)) = stack.take(layout) else {
                return Room::Full;
            };
            inst.stack = stack.clone();
            GROWN.fetch_add(1, Ordering::Relaxed);
            Room::At(stack, p, mark)
        })
        .unwrap_or(Room::None)
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
        if let Some(layout) = layout {
            match room_for(layout) {
                Room::At(stack, p, mark) => return Frames::placed(items, layout, stack, p, mark),
                Room::Full => {
                    HEAP_FALLBACK_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
                }
                Room::None => {}
            }
        }
        let b: Box<[F]> = items.into_boxed_slice();
        let ptr = NonNull::new(Box::into_raw(b).cast::<F>()).unwrap_or(NonNull::dangling());
        Frames {
            ptr,
            len,
            stack: None,
        }
    }

    /// `items` moved into the frame at `p` (of `layout`, taken from `stack` over `mark`).
    fn placed(
        items: Vec<F>,
        layout: Layout,
        stack: Arc<FrameStack>,
        p: NonNull<u8>,
        mark: usize,
    ) -> Frames<F> {
        let len = items.len();
        let ptr = p.cast::<F>();
        for (i, f) in items.into_iter().enumerate() {
            // SAFETY: the frame has room for `len` aligned values of F; slot i is written
            // once.
            unsafe { ptr.add(i).write(f) };
        }
        let end = p.as_ptr() as usize + layout.size() - stack.span().0 as usize;
        Frames {
            ptr,
            len,
            stack: Some((stack, mark, end)),
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

    #[test]
    fn growable_frame_memory_is_replaced_by_one_sized_for_a_spawn_only_when_empty() {
        let stack = FrameStack::new(Arc::new(Mapping::anonymous(1 << 16).unwrap()));
        install_growable(stack.clone());
        let big = Frames::new(vec![[1u8; 1 << 17]; 3]);
        assert!(big.in_frame_memory(), "grown for the spawn");
        let (base, len) = installed_span().unwrap();
        assert!(len >= 3 << 17 && len % GROW_UNIT == 0, "{len}");
        assert_ne!(base, stack.span().0);
        // Nested in live frames: no room, not replaced, on the heap (and counted).
        let before = HEAP_FALLBACK_BYTES.load(Ordering::Relaxed);
        let nested = Frames::new(vec![[2u8; 1 << 17]; 64]);
        assert!(!nested.in_frame_memory());
        assert!(HEAP_FALLBACK_BYTES.load(Ordering::Relaxed) - before >= 64 << 17);
        assert_eq!(installed_span().unwrap().0, base);
        drop((nested, big));
        // Uninstalling the stack installed removes the one it grew into.
        uninstall(&stack);
        assert!(installed().is_none());
        // A fixed one is never replaced.
        install(stack.clone());
        assert!(!Frames::new(vec![[0u8; 1 << 17]]).in_frame_memory());
        uninstall(&stack);
    }
}
