//! Non-blocking guards for state that the client threads of one compute node share: a
//! sharded reader-writer lock ([`TryRw`]) and a try-lock ([`TryLock`]), on 32-bit atomics
//! only (the bare-metal targets have no 64-bit ones).
//!
//! Neither ever makes a thread wait for another: an acquisition that would have to wait fails
//! and the caller goes without (a cache skips the lookup or the update, which is correct
//! because nothing rests on the cache) or yields to its executor and polls again (the local
//! table). Readers of a [`TryRw`] touch only their own cache line (their shard of the reader
//! count), so walks from many threads do not contend; a writer sets its flag and waits a
//! bounded number of spins for the readers in flight (whose critical sections are a few
//! hundred nanoseconds: never across an `await`), and gives up if they do not drain. Giving
//! up also covers the case a `RefCell` would have panicked on: a write attempted while the
//! same thread holds a read guard.
use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering::*};

/// Reader-count shards: one cache line each.
pub(crate) const SHARDS: usize = 16;

/// How many times a writer polls the reader shards before it gives up.
const DRAIN_SPINS: u32 = 1 << 12;

#[repr(align(64))]
struct Shard(AtomicU32);

/// A reader-writer lock whose acquisitions fail instead of waiting (see the module doc).
pub(crate) struct TryRw<T> {
    writer: AtomicBool,
    readers: [Shard; SHARDS],
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through the guards below: shared references while a
// reader count is held and no writer is (the writer flag is checked after the count is
// raised, and the writer checks every count after raising its flag, both `SeqCst`, so they
// cannot both miss each other), and an exclusive reference while the writer flag is held and
// every count was seen zero. So `T: Send + Sync` suffices for sharing it between threads.
unsafe impl<T: Send + Sync> Sync for TryRw<T> {}
// SAFETY: moving the lock moves the value; nothing in it refers to a thread.
unsafe impl<T: Send> Send for TryRw<T> {}

/// Shared access through [`TryRw::read`].
pub(crate) struct ReadGuard<'a, T> {
    lock: &'a TryRw<T>,
    shard: usize,
}

/// Exclusive access through [`TryRw::write`].
pub(crate) struct WriteGuard<'a, T> {
    lock: &'a TryRw<T>,
}

impl<T> TryRw<T> {
    pub(crate) fn new(value: T) -> TryRw<T> {
        TryRw {
            writer: AtomicBool::new(false),
            readers: core::array::from_fn(|_| Shard(AtomicU32::new(0))),
            value: UnsafeCell::new(value),
        }
    }

    /// Shared access, counted in shard `shard % SHARDS` (a handle keeps one); `None` while a
    /// writer holds the lock.
    pub(crate) fn read(&self, shard: usize) -> Option<ReadGuard<'_, T>> {
        let shard = shard % SHARDS;
        let c = &self.readers[shard].0;
        c.fetch_add(1, SeqCst);
        if self.writer.load(SeqCst) {
            c.fetch_sub(1, Release);
            return None;
        }
        Some(ReadGuard { lock: self, shard })
    }

    /// Exclusive access; `None` if another writer holds the lock or the readers in flight
    /// did not drain within a bounded spin.
    pub(crate) fn write(&self) -> Option<WriteGuard<'_, T>> {
        if self
            .writer
            .compare_exchange(false, true, SeqCst, Relaxed)
            .is_err()
        {
            return None;
        }
        for s in &self.readers {
            let mut spins = 0;
            while s.0.load(SeqCst) != 0 {
                spins += 1;
                if spins > DRAIN_SPINS {
                    self.writer.store(false, Release);
                    return None;
                }
                core::hint::spin_loop();
            }
        }
        Some(WriteGuard { lock: self })
    }
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: a reader count is held and no writer held the flag when it was raised;
        // a writer waits for every count to reach zero before it touches the value.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> Drop for ReadGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.readers[self.shard].0.fetch_sub(1, Release);
    }
}

impl<T> Deref for WriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the writer flag is held and every reader count was zero after it was
        // raised; new readers see the flag and back out.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`: this guard is the only access to the value.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for WriteGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.writer.store(false, Release);
    }
}

/// A lock that is only ever tried: one bucket of the local table.
#[repr(align(64))]
pub(crate) struct TryLock<T> {
    held: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through `TryLockGuard`, which exists only while this
// guard's `compare_exchange` set the flag (Acquire) and until its drop clears it (Release).
unsafe impl<T: Send> Sync for TryLock<T> {}

/// Exclusive access through [`TryLock::try_lock`].
pub(crate) struct TryLockGuard<'a, T> {
    lock: &'a TryLock<T>,
}

impl<T> TryLock<T> {
    pub(crate) fn new(value: T) -> TryLock<T> {
        TryLock {
            held: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Exclusive access, or `None` while another holds it.
    pub(crate) fn try_lock(&self) -> Option<TryLockGuard<'_, T>> {
        self.held
            .compare_exchange(false, true, Acquire, Relaxed)
            .ok()
            .map(|_| TryLockGuard { lock: self })
    }
}

impl<T> Deref for TryLockGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the flag is held by this guard: no other reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for TryLockGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for TryLockGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.held.store(false, Release);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn readers_share_and_a_writer_excludes_them() {
        let l = TryRw::new(5u32);
        let a = l.read(0).unwrap();
        let b = l.read(1).unwrap();
        assert_eq!(*a + *b, 10);
        // Readers in flight: the writer gives up instead of waiting forever.
        assert!(l.write().is_none());
        drop((a, b));
        let mut w = l.write().unwrap();
        *w = 6;
        assert!(l.read(3).is_none());
        assert!(l.write().is_none());
        drop(w);
        assert_eq!(*l.read(3).unwrap(), 6);
    }

    #[test]
    fn try_lock_is_exclusive() {
        let l = TryLock::new(1u8);
        let mut g = l.try_lock().unwrap();
        *g = 2;
        assert!(l.try_lock().is_none());
        drop(g);
        assert_eq!(*l.try_lock().unwrap(), 2);
    }

    #[test]
    fn threads_never_see_a_torn_pair() {
        let l = TryRw::new((0u64, 0u64));
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 1..=20_000u64 {
                    loop {
                        if let Some(mut w) = l.write() {
                            *w = (i, i);
                            break;
                        }
                    }
                }
            });
            for t in 0..2 {
                let l = &l;
                s.spawn(move || {
                    for _ in 0..20_000 {
                        if let Some(r) = l.read(t) {
                            assert_eq!(r.0, r.1);
                        }
                    }
                });
            }
        });
        assert_eq!(*l.read(0).unwrap(), (20_000, 20_000));
    }
}
