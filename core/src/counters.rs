//! Per-queue-pair counters: the hardware-independent performance figures.
//!
//! Every fabric counts, for every post: the verbs by kind, bytes each way, doorbells (posts)
//! and round trips (posts whose completion a coroutine waited for). Counters live in `Cell`s:
//! a queue pair belongs to one thread, and counting must cost no atomic instruction.
use crate::fabric::{Op, Verb};
use core::cell::Cell;
use core::ops::{Add, Sub};

/// Live counters of one queue pair.
#[derive(Debug, Default)]
pub struct Counters {
    verbs: [Cell<u64>; 7],
    bytes_out: Cell<u64>,
    bytes_in: Cell<u64>,
    doorbells: Cell<u64>,
    round_trips: Cell<u64>,
    errors: Cell<u64>,
}

/// A plain copy of [`Counters`], to subtract, add and print.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// Indexed like [`Verb::ALL`].
    pub verbs: [u64; 7],
    /// Payload bytes sent by this side (WRITE/SEND data, atomic operands).
    pub bytes_out: u64,
    /// Payload bytes received by this side (READ data, atomic results, received messages).
    pub bytes_in: u64,
    /// Posts: batches of work requests rung with one doorbell.
    pub doorbells: u64,
    /// Posts whose completion a coroutine waited for.
    pub round_trips: u64,
    /// Failed posts and receives.
    pub errors: u64,
}

fn bump(c: &Cell<u64>, by: u64) {
    c.set(c.get().wrapping_add(by));
}

const fn slot(v: Verb) -> usize {
    match v {
        Verb::Read => 0,
        Verb::Write => 1,
        Verb::WriteImm => 2,
        Verb::Cas => 3,
        Verb::Faa => 4,
        Verb::Send => 5,
        Verb::Recv => 6,
    }
}

impl Counters {
    /// All counters at zero.
    pub const fn new() -> Counters {
        Counters {
            verbs: [const { Cell::new(0) }; 7],
            bytes_out: Cell::new(0),
            bytes_in: Cell::new(0),
            doorbells: Cell::new(0),
            round_trips: Cell::new(0),
            errors: Cell::new(0),
        }
    }

    /// Counts one posted batch: one doorbell, and each op's verb and bytes.
    pub fn count_post(&self, ops: &[Op<'_>]) {
        bump(&self.doorbells, 1);
        for op in ops {
            self.count_op(op);
        }
    }

    /// Counts one op's verb and bytes (without a doorbell).
    pub fn count_op(&self, op: &Op<'_>) {
        bump(&self.verbs[slot(op.verb())], 1);
        match op {
            Op::Read { local, .. } => bump(&self.bytes_in, local.len() as u64),
            Op::Write { local, .. } | Op::WriteImm { local, .. } | Op::Send { local } => {
                bump(&self.bytes_out, local.len() as u64)
            }
            Op::Cas { .. } => {
                bump(&self.bytes_out, 16);
                bump(&self.bytes_in, 8);
            }
            // Compare and swap words and their two masks (the extended atomic's operands).
            Op::MaskedCas { .. } => {
                bump(&self.bytes_out, 32);
                bump(&self.bytes_in, 8);
            }
            Op::Faa { .. } => {
                bump(&self.bytes_out, 8);
                bump(&self.bytes_in, 8);
            }
        }
    }

    /// Counts a dependent wait: a coroutine blocked on a completion.
    pub fn count_round_trip(&self) {
        bump(&self.round_trips, 1);
    }

    /// Counts a receive completion of `len` payload bytes.
    pub fn count_recv(&self, len: usize) {
        bump(&self.verbs[slot(Verb::Recv)], 1);
        bump(&self.bytes_in, len as u64);
    }

    /// Counts one failed post or receive.
    pub fn count_error(&self) {
        bump(&self.errors, 1);
    }

    /// A copy of the counters as they are now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            verbs: core::array::from_fn(|i| self.verbs[i].get()),
            bytes_out: self.bytes_out.get(),
            bytes_in: self.bytes_in.get(),
            doorbells: self.doorbells.get(),
            round_trips: self.round_trips.get(),
            errors: self.errors.get(),
        }
    }
}

impl Snapshot {
    /// How many ops of verb `v` were counted.
    pub fn verb(&self, v: Verb) -> u64 {
        self.verbs[slot(v)]
    }
    /// All verbs, receives excluded (they are the peer's work).
    pub fn posted_verbs(&self) -> u64 {
        self.verbs.iter().sum::<u64>() - self.verb(Verb::Recv)
    }
}

impl Add for Snapshot {
    type Output = Snapshot;
    fn add(self, o: Snapshot) -> Snapshot {
        Snapshot {
            verbs: core::array::from_fn(|i| self.verbs[i] + o.verbs[i]),
            bytes_out: self.bytes_out + o.bytes_out,
            bytes_in: self.bytes_in + o.bytes_in,
            doorbells: self.doorbells + o.doorbells,
            round_trips: self.round_trips + o.round_trips,
            errors: self.errors + o.errors,
        }
    }
}

impl Sub for Snapshot {
    type Output = Snapshot;
    /// Counters since an earlier snapshot (wrapping, as the counters do).
    fn sub(self, o: Snapshot) -> Snapshot {
        Snapshot {
            verbs: core::array::from_fn(|i| self.verbs[i].wrapping_sub(o.verbs[i])),
            bytes_out: self.bytes_out.wrapping_sub(o.bytes_out),
            bytes_in: self.bytes_in.wrapping_sub(o.bytes_in),
            doorbells: self.doorbells.wrapping_sub(o.doorbells),
            round_trips: self.round_trips.wrapping_sub(o.round_trips),
            errors: self.errors.wrapping_sub(o.errors),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use remora_layouts::GlobalAddr;

    #[test]
    fn counts_verbs_bytes_and_doorbells() {
        let c = Counters::new();
        let mut buf = [0u8; 64];
        let mut old = 0;
        let before = c.snapshot();
        c.count_post(&[
            Op::Read {
                remote: GlobalAddr::new(0, 128),
                local: &mut buf,
            },
            Op::Faa {
                remote: GlobalAddr::new(0, 8),
                add: 1,
                old: &mut old,
            },
        ]);
        c.count_round_trip();
        let d = c.snapshot() - before;
        assert_eq!(d.verb(Verb::Read), 1);
        assert_eq!(d.verb(Verb::Faa), 1);
        assert_eq!(d.posted_verbs(), 2);
        assert_eq!(d.bytes_in, 72);
        assert_eq!(d.bytes_out, 8);
        assert_eq!(d.doorbells, 1);
        assert_eq!(d.round_trips, 1);
        assert_eq!((d + d).round_trips, 2);
    }
}
