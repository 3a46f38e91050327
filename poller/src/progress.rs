//! Per-round progress hooks: what a fabric must poll to make its futures ready (a verbs
//! thread's completion queues) registers here, and the executors of this thread
//! ([`crate::executor::run_coroutines`], the compute node's poller) call [`run`] once per
//! round, before they poll the coroutines that are ready. A source's hook drains what it
//! polls and wakes exactly the coroutines whose waits ended; a waiting future then needs to
//! wake itself only when no executor of its thread calls the hooks ([`driven`] is false: a
//! spin `block_on`, an application thread), never round after round under one that does.
//!
//! One table per thread, a fixed [`MAX_SOURCES`] entries: registering and running allocate
//! nothing and make no system call.
use std::cell::Cell;

/// Sources one thread may have registered at once (a verbs thread registers one per send
/// completion queue with waiters; a thread has one or two).
pub const MAX_SOURCES: usize = 16;

/// A registered source: `hook(data)` runs once per round.
#[derive(Clone, Copy)]
struct Source {
    data: *const (),
    hook: unsafe fn(*const ()),
}

thread_local! {
    static SOURCES: [Cell<Option<Source>>; MAX_SOURCES] =
        const { [const { Cell::new(None) }; MAX_SOURCES] };
    /// Entries in use are below this index.
    static USED: Cell<usize> = const { Cell::new(0) };
    /// Executors running on this thread that call [`run`] every round.
    static DRIVERS: Cell<u32> = const { Cell::new(0) };
}

/// Registers `hook(data)` to run once per round of this thread's executors, until
/// [`unregister`]ed. False when the table is full (the caller must then make progress by
/// itself, as without an executor).
///
/// # Safety
/// `data` stays valid for `hook`, and the hook may be called with it on this thread at any
/// round, until `unregister(data)` is called on this thread. The hook must not register or
/// unregister sources.
pub unsafe fn register(data: *const (), hook: unsafe fn(*const ())) -> bool {
    SOURCES.with(|s| {
        let used = USED.with(Cell::get);
        let Some(i) = s.iter().position(|c| c.get().is_none()) else {
            return false;
        };
        s[i].set(Some(Source { data, hook }));
        USED.with(|u| u.set(used.max(i + 1)));
        true
    })
}

/// Removes the source registered with `data` on this thread (nothing if there is none).
pub fn unregister(data: *const ()) {
    SOURCES.with(|s| {
        let used = USED.with(Cell::get);
        for c in &s[..used] {
            if c.get().is_some_and(|src| src.data == data) {
                c.set(None);
            }
        }
        let mut n = used;
        while n > 0 && s[n - 1].get().is_none() {
            n -= 1;
        }
        USED.with(|u| u.set(n));
    })
}

/// Runs every registered source's hook once; true when sources remain registered (their
/// futures are waiting: an executor with nothing ready should keep polling, not sleep).
#[inline]
pub fn run() -> bool {
    let used = USED.with(Cell::get);
    if used == 0 {
        return false;
    }
    SOURCES.with(|s| {
        for c in &s[..used] {
            if let Some(src) = c.get() {
                // SAFETY: registered with `data` valid for `hook` until unregistered, which
                // has not happened (the entry is still set); hooks do not touch the table.
                unsafe { (src.hook)(src.data) };
            }
        }
    });
    USED.with(Cell::get) > 0
}

/// True while an executor that calls [`run`] every round runs on this thread.
#[inline]
pub fn driven() -> bool {
    DRIVERS.with(Cell::get) > 0
}

/// Marks this thread as driven (see [`driven`]) until dropped: held by an executor for as
/// long as it runs.
pub struct Driving(());

impl Driving {
    /// The executor calling this will call [`run`] once per round from now on.
    pub fn start() -> Driving {
        DRIVERS.with(|d| d.set(d.get() + 1));
        Driving(())
    }
}

impl Drop for Driving {
    fn drop(&mut self) {
        DRIVERS.with(|d| d.set(d.get() - 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe fn bump(data: *const ()) {
        // SAFETY: registered below with a live `Cell<u32>`.
        let c = unsafe { &*data.cast::<Cell<u32>>() };
        c.set(c.get() + 1);
    }

    #[test]
    fn hooks_run_once_per_round_until_unregistered() {
        let (a, b) = (Cell::new(0u32), Cell::new(0u32));
        let (pa, pb) = (&raw const a as *const (), &raw const b as *const ());
        assert!(!run(), "nothing registered");
        // SAFETY: `a` and `b` outlive their registrations (removed below).
        unsafe {
            assert!(register(pa, bump));
            assert!(register(pb, bump));
        }
        assert!(run());
        unregister(pa);
        assert!(run());
        unregister(pb);
        assert!(!run());
        assert_eq!((a.get(), b.get()), (1, 2));
        assert!(!driven());
        {
            let _d = Driving::start();
            assert!(driven());
        }
        assert!(!driven());
    }

    #[test]
    fn a_full_table_refuses() {
        let c = Cell::new(0u32);
        let base = &raw const c as *const u8;
        // Distinct keys (never dereferenced except by `bump`, which the full table never
        // runs here).
        let keys: Vec<*const ()> = (0..MAX_SOURCES)
            .map(|i| base.wrapping_add(i).cast())
            .collect();
        for &k in &keys {
            // SAFETY: never run: unregistered before any `run`.
            assert!(unsafe { register(k, bump) });
        }
        // SAFETY: refused, so never run.
        assert!(!unsafe { register(base.wrapping_add(MAX_SOURCES).cast(), bump) });
        for &k in &keys {
            unregister(k);
        }
        assert!(!run());
        assert_eq!(c.get(), 0);
    }
}
