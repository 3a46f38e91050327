//! SMART's read delegation and write combining: its leaves' entries in the node's table
//! ([`crate::delegation`], shared by every client thread's handle of the node and all their
//! coroutines, [`super::SmartNode`]), and how a leader reads and writes a leaf. A leader's
//! read result is its `lookup`'s, whose leaf the CRC verified (a torn leaf is re-read, never
//! handed out), and its errors are handed to its waiters too. Leases are
//! `SmartConfig::lease`, on the waiter's own clock.
use super::Smart;
use super::bump;
use super::config::SmartError;
use super::key::Key;
use super::write::WriteKind;
use crate::delegation::{Counted, Flavor, Host, Table};
use crate::fabric::Endpoint;
use crate::lease::LeaseConfig;
use remora_layouts::smart::{MAX_KEY_LEN, MAX_LEAF_BYTES};
use std_alloc::vec::Vec;

/// FNV-1a: places leaves and local entries.
pub(crate) fn hash_key(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// SMART's entries: encoded keys and values up to the tree's `value_cap`, on the heap
/// (preallocated).
pub(crate) enum Leaves {}

impl Flavor for Leaves {
    type Key = Vec<u8>;
    type Value = Vec<u8>;
    type Kind = WriteKind;
    type Error = SmartError;
    type Scratch = [u8; MAX_LEAF_BYTES];
    const KEY_CAP: usize = MAX_KEY_LEN;
    const SHARES_ERRORS: bool = true;
    fn home(key: &[u8]) -> u64 {
        hash_key(key)
    }
    fn scratch() -> [u8; MAX_LEAF_BYTES] {
        [0; MAX_LEAF_BYTES]
    }
    fn too_small(need: usize, got: usize) -> SmartError {
        SmartError::BufferTooSmall { need, got }
    }
    fn is_too_small(e: &SmartError) -> bool {
        matches!(e, SmartError::BufferTooSmall { .. })
    }
}

/// The node's table.
pub(crate) type LocalTable = Table<Leaves>;

impl LocalTable {
    /// A table of `n` entries (at least one bucket) for values up to `value_cap`.
    pub(crate) fn new(n: usize, value_cap: usize) -> LocalTable {
        Table::with_entries(n.max(1), value_cap)
    }
}

impl<E: Endpoint> Host for Smart<'_, E> {
    fn now_ns(&self) -> u64 {
        self.ep.now_ns()
    }
    fn lease(&self) -> LeaseConfig {
        self.cfg.lease
    }
    fn value_cap(&self) -> usize {
        self.cfg.value_cap
    }
    fn count(&self, what: Counted) {
        bump(match what {
            Counted::Delegated => &self.stats.delegated_reads,
            Counted::Combined => &self.stats.combined_writes,
            Counted::TakenOver => &self.stats.leader_takeovers,
            Counted::SecondWrite { covered, ns } => {
                let s = &self.stats;
                s.second_write_covered
                    .set(s.second_write_covered.get() + u64::from(covered));
                s.second_write_ns.set(s.second_write_ns.get() + ns);
                &s.second_writes
            }
        });
    }
    fn pause(&self, ns: u64) -> impl core::future::Future<Output = ()> {
        self.ep.timer(ns)
    }
}

impl<'e, E: Endpoint> Smart<'e, E> {
    /// `get` with read delegation (`key` encoded).
    pub(crate) async fn get_delegated(
        &self,
        key: &[u8],
        out: &mut [u8],
    ) -> Result<Option<usize>, SmartError> {
        if !self.cfg.techniques.delegation {
            return self.get_direct(key, out).await;
        }
        let read = async |out: &mut [u8]| self.get_direct(key, out).await;
        self.node.local.get(self, key, out, read).await
    }

    /// `upsert`/`update` with write combining; returns whether the key was present.
    pub(crate) async fn write_combined(
        &self,
        kind: WriteKind,
        key: &Key,
        value: &[u8],
    ) -> Result<bool, SmartError> {
        if value.len() > self.cfg.value_cap {
            return Err(SmartError::ValueTooLarge {
                len: value.len(),
                cap: self.cfg.value_cap,
            });
        }
        if !self.cfg.techniques.combining {
            return self.write_op(kind, key, value).await;
        }
        let write = async |k, v: &[u8]| self.write_op(k, key, v).await;
        self.node
            .local
            .write(self, key.bytes(), kind, value, write)
            .await
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::tests::{block, endpoint, memory};
    use super::super::*;
    use core::future::Future;
    use core::pin::pin;
    use core::task::{Context, Waker};

    /// SMART with every technique, and waiters that replace a leader after 50 polls (the
    /// in-memory fabric has no clock).
    fn cfg() -> SmartConfig {
        let mut cfg = SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8);
        cfg.lease.max_attempts = 50;
        cfg
    }

    /// Polls `f` once: a leader stopped inside its remote access.
    fn poll_once<F: Future>(f: core::pin::Pin<&mut F>) {
        let mut cx = Context::from_waker(Waker::noop());
        assert!(
            f.poll(&mut cx).is_pending(),
            "stopped before its first verb"
        );
    }

    #[test]
    fn a_dead_read_leader_releases_its_entry_at_once() {
        let m = memory(16 << 20);
        let ep = endpoint(&m);
        let s = block(Smart::open(&ep, cfg())).unwrap();
        let key = 5u64.to_be_bytes();
        block(s.upsert(&key, &[1; 8])).unwrap();
        let mut out = [0u8; 8];
        {
            // Dies (its future dropped) in the middle of the read it leads.
            let mut dead = [0u8; 8];
            poll_once(pin!(s.get(&key, &mut dead)));
        }
        // Before: 1 for ever (the dead leader's), and the entry never left its key.
        assert_eq!(
            s.node.local.users(&key),
            0,
            "the dead leader's count was released"
        );
        assert_eq!(block(s.get(&key, &mut out)).unwrap(), Some(8));
        assert_eq!(
            s.stats().leader_takeovers,
            0,
            "led at once, no lease waited"
        );
        assert_eq!(s.node.local.users(&key), 0);
    }

    #[test]
    fn a_dead_waiter_releases_its_count() {
        let m = memory(16 << 20);
        let ep = endpoint(&m);
        let s = block(Smart::open(&ep, cfg())).unwrap();
        let key = 8u64.to_be_bytes();
        block(s.upsert(&key, &[6; 8])).unwrap();
        let (mut lead_out, mut dead) = ([0u8; 8], [0u8; 8]);
        let mut leader = pin!(s.get(&key, &mut lead_out));
        poll_once(leader.as_mut());
        // A second reader joins as a waiter, and dies.
        poll_once(pin!(s.get(&key, &mut dead)));
        assert_eq!(
            s.node.local.users(&key),
            1,
            "only the leader's count is left"
        );
        assert_eq!(block(leader).unwrap(), Some(8));
        assert_eq!(s.node.local.users(&key), 0);
    }

    #[test]
    fn a_read_leader_with_a_small_buffer_hands_the_read_on() {
        let m = memory(16 << 20);
        let ep = endpoint(&m);
        let s = block(Smart::open(&ep, cfg())).unwrap();
        let key = 9u64.to_be_bytes();
        block(s.upsert(&key, &[7; 8])).unwrap();
        let (mut first, mut small, mut out) = ([0u8; 8], [0u8; 4], [0u8; 8]);
        {
            // A read in flight; two readers arrive, so they wait for the next read.
            let mut lead1 = pin!(s.get(&key, &mut first));
            poll_once(lead1.as_mut());
            let mut lead2 = pin!(s.get(&key, &mut small));
            poll_once(lead2.as_mut());
            let mut waiter = pin!(s.get(&key, &mut out));
            poll_once(waiter.as_mut());
            assert_eq!(block(lead1).unwrap(), Some(8));
            // The reader with the small buffer leads the next read; the other waits on it.
            poll_once(lead2.as_mut());
            poll_once(waiter.as_mut());
            assert!(matches!(
                block(lead2),
                Err(SmartError::BufferTooSmall { need: 8, got: 4 })
            ));
            // Too small for the leader, not for the waiter: it reads the value itself.
            assert_eq!(block(waiter).unwrap(), Some(8));
        }
        assert_eq!(out, [7; 8]);
        assert_eq!(s.node.local.users(&key), 0);
    }

    #[test]
    fn a_slow_read_leader_coming_back_releases_nothing_twice() {
        let m = memory(16 << 20);
        let ep = endpoint(&m);
        let s = block(Smart::open(&ep, cfg())).unwrap();
        let key = 6u64.to_be_bytes();
        block(s.upsert(&key, &[2; 8])).unwrap();
        let (mut slow_out, mut out) = ([0u8; 8], [0u8; 8]);
        {
            let mut slow = pin!(s.get(&key, &mut slow_out));
            poll_once(slow.as_mut());
            // Replaced while stopped, then resumed: it publishes nothing, releases nothing.
            assert_eq!(block(s.get(&key, &mut out)).unwrap(), Some(8));
            assert_eq!(block(slow).unwrap(), Some(8));
        }
        assert_eq!(slow_out, [2; 8]);
        assert_eq!(s.node.local.users(&key), 0);
    }

    #[test]
    fn a_dead_write_leader_releases_its_entry() {
        let m = memory(16 << 20);
        let ep = endpoint(&m);
        let s = block(Smart::open(&ep, cfg())).unwrap();
        let key = 7u64.to_be_bytes();
        block(s.upsert(&key, &[3; 8])).unwrap();
        poll_once(pin!(s.upsert(&key, &[4; 8])));
        assert_eq!(s.node.local.users(&key), 1);
        block(s.upsert(&key, &[5; 8])).unwrap();
        assert_eq!(s.stats().leader_takeovers, 1);
        assert_eq!(
            s.node.local.users(&key),
            0,
            "the dead leader's count was released"
        );
        let mut out = [0u8; 8];
        assert_eq!(block(s.get(&key, &mut out)).unwrap(), Some(8));
        assert_eq!(out, [5; 8]);
    }
}
