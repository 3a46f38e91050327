//! Read delegation and write combining: a table of local entries per handle, shared by the
//! handle's coroutines (one thread, so a `RefCell` never borrowed across an await).
//!
//! Delegation is linearizable: a reader that finds a read of its key in flight does not take
//! that read's result (it may predate the reader); it waits for the *next* read, which one of
//! the waiting readers issues once the current one completes, and which therefore starts
//! after every reader it serves arrived. Combining: writers that find a write of their key in
//! flight leave their value in the entry; when the writer finishes, it writes the latest
//! pending value once, and every writer whose value it covered returns (their writes are
//! linearized just before the one that was applied, each overwriting the previous).
use super::Smart;
use super::bump;
use super::config::SmartError;
use super::key::Key;
use super::write::WriteKind;
use crate::block_on::yield_now;
use crate::fabric::Endpoint;
use remora_layouts::smart::MAX_LEAF_BYTES;
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

struct Entry {
    users: u32,
    key: Vec<u8>,
    // Delegation.
    reading: bool,
    read_gen: u64,
    done_gen: u64,
    result: Result<Option<usize>, SmartError>,
    value: Vec<u8>,
    // Combining.
    writing: bool,
    pending: Option<WriteKind>,
    pending_seq: u64,
    applied_seq: u64,
    applied: Result<bool, SmartError>,
    pending_val: Vec<u8>,
}

pub(crate) struct LocalTable {
    entries: Vec<Entry>,
}

const PROBE: usize = 8;

impl LocalTable {
    pub fn new(n: usize, value_cap: usize) -> LocalTable {
        let n = n.max(PROBE).next_power_of_two();
        LocalTable {
            entries: (0..n)
                .map(|_| Entry {
                    users: 0,
                    key: Vec::with_capacity(remora_layouts::smart::MAX_KEY_LEN),
                    reading: false,
                    read_gen: 0,
                    done_gen: 0,
                    result: Ok(None),
                    value: Vec::with_capacity(value_cap),
                    writing: false,
                    pending: None,
                    pending_seq: 0,
                    applied_seq: 0,
                    applied: Ok(false),
                    pending_val: Vec::with_capacity(value_cap),
                })
                .collect(),
        }
    }

    /// The entry of `key` (joining its users), a fresh one, or `None` when the probe
    /// window is full of other keys (then the caller goes to remote memory directly).
    fn claim(&mut self, key: &[u8]) -> Option<usize> {
        let mask = self.entries.len() - 1;
        let home = hash_key(key) as usize;
        let mut free = None;
        for d in 0..PROBE {
            let i = (home + d) & mask;
            let e = &self.entries[i];
            if e.users > 0 && e.key == key {
                self.entries[i].users += 1;
                return Some(i);
            }
            if e.users == 0 && free.is_none() {
                free = Some(i);
            }
        }
        let i = free?;
        let e = &mut self.entries[i];
        e.users = 1;
        e.key.clear();
        e.key.extend_from_slice(key);
        e.reading = false;
        e.read_gen = 0;
        e.done_gen = 0;
        e.writing = false;
        e.pending = None;
        e.pending_seq = 0;
        e.applied_seq = 0;
        Some(i)
    }

    fn release(&mut self, i: usize) {
        self.entries[i].users -= 1;
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
        let Some(i) = self.local.borrow_mut().claim(key) else {
            return self.get_direct(key, out).await;
        };
        let (mut leader, my_gen) = {
            let mut t = self.local.borrow_mut();
            let e = &mut t.entries[i];
            if e.reading {
                (false, e.read_gen + 1)
            } else {
                e.reading = true;
                e.read_gen += 1;
                (true, e.read_gen)
            }
        };
        loop {
            if leader {
                let mut val = [0u8; MAX_LEAF_BYTES];
                let r = self.get_direct(key, &mut val[..self.cfg.value_cap]).await;
                let mut t = self.local.borrow_mut();
                let e = &mut t.entries[i];
                e.value.clear();
                if let Ok(Some(n)) = r {
                    e.value.extend_from_slice(&val[..n]);
                }
                e.result = r;
                e.done_gen = my_gen;
                e.reading = false;
                t.release(i);
                drop(t);
                return copy_out(r, &val, out);
            }
            yield_now().await;
            let mut t = self.local.borrow_mut();
            let e = &mut t.entries[i];
            if e.done_gen >= my_gen {
                let r = copy_out(e.result, &e.value, out);
                t.release(i);
                bump(&self.stats.delegated_reads);
                return r;
            }
            if !e.reading {
                e.reading = true;
                e.read_gen = my_gen;
                leader = true;
            }
        }
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
        let Some(i) = self.local.borrow_mut().claim(key.bytes()) else {
            return self.write_op(kind, key, value).await;
        };
        // `lead`: Some(None) = lead with my own value; Some(Some(seq)) = lead with my
        // deposited value `seq`; None = wait.
        let mut lead: Option<Option<u64>> = None;
        let mut my_seq = None;
        {
            let mut t = self.local.borrow_mut();
            let e = &mut t.entries[i];
            if !e.writing {
                e.writing = true;
                lead = Some(None);
            } else if e.pending.is_none() || e.pending == Some(kind) {
                e.pending = Some(kind);
                e.pending_val.clear();
                e.pending_val.extend_from_slice(value);
                e.pending_seq += 1;
                my_seq = Some(e.pending_seq);
            }
        }
        loop {
            if let Some(own_seq) = lead {
                let r = self.write_op(kind, key, value).await;
                if let Some(s) = own_seq {
                    let mut t = self.local.borrow_mut();
                    t.entries[i].applied = r;
                    t.entries[i].applied_seq = s;
                }
                // Serve the latest pending value once.
                let mut buf = [0u8; MAX_LEAF_BYTES];
                let taken = {
                    let mut t = self.local.borrow_mut();
                    let e = &mut t.entries[i];
                    e.pending.take().map(|k| {
                        let n = e.pending_val.len();
                        buf[..n].copy_from_slice(&e.pending_val);
                        (k, n, e.pending_seq)
                    })
                };
                if let Some((k, n, seq)) = taken {
                    let r2 = self.write_op(k, key, &buf[..n]).await;
                    let mut t = self.local.borrow_mut();
                    t.entries[i].applied = r2;
                    t.entries[i].applied_seq = seq;
                }
                let mut t = self.local.borrow_mut();
                t.entries[i].writing = false;
                t.release(i);
                return r;
            }
            yield_now().await;
            let mut t = self.local.borrow_mut();
            let e = &mut t.entries[i];
            if let Some(s) = my_seq
                && e.applied_seq >= s
            {
                let r = e.applied;
                t.release(i);
                bump(&self.stats.combined_writes);
                return r;
            }
            if !e.writing {
                match my_seq {
                    Some(s) if e.pending_seq == s && e.pending.is_some() => {
                        e.pending = None;
                        e.writing = true;
                        lead = Some(Some(s));
                    }
                    Some(_) => {}
                    None => {
                        e.writing = true;
                        lead = Some(None);
                    }
                }
            }
        }
    }
}

fn copy_out(
    r: Result<Option<usize>, SmartError>,
    val: &[u8],
    out: &mut [u8],
) -> Result<Option<usize>, SmartError> {
    match r {
        Ok(Some(n)) => {
            if n > out.len() {
                return Err(SmartError::BufferTooSmall {
                    need: n,
                    got: out.len(),
                });
            }
            out[..n].copy_from_slice(&val[..n]);
            Ok(Some(n))
        }
        other => other,
    }
}
