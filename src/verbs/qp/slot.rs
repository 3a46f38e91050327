//! The slot table's entries: one batch in flight each, packed into one word, so that a
//! completion's update and the waiting post's read are each one 8-byte access (a struct of
//! narrow fields, written field by field and read back whole, stalled store forwarding on
//! every completion).
use crate::verbs::sys;
use std::cell::Cell;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlotState {
    Free,
    Posted,
    Done,
}

/// One batch in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Slot {
    pub(super) state: SlotState,
    /// Work requests in the batch.
    pub(super) n: u16,
    /// Index of the last one (the signaled one).
    pub(super) last: u16,
    /// First failed work request and its status (statuses above 255 read as 255, which no
    /// verbs status is).
    pub(super) err: Option<(u16, sys::ibv_wc_status)>,
    /// Nobody waits for it: released as soon as it completes (a detached post).
    pub(super) detached: bool,
    /// Some op of it went through staging (results to copy out when it completes).
    pub(super) staged: bool,
    /// It has a one-off staging registration (released with the slot).
    pub(super) oneoff: bool,
    /// An op the NIC would refuse at post time ended it (its error is the batch's).
    pub(super) refused: bool,
}

pub(super) const FREE: Slot = Slot {
    state: SlotState::Free,
    n: 0,
    last: 0,
    err: None,
    detached: false,
    staged: false,
    oneoff: false,
    refused: false,
};

// Bit positions: state 0-1, n 2-17, last 18-33, error flag 34, its work request 35-50, its
// status 51-58, then the four flags 59-62.
const N: u32 = 2;
const LAST: u32 = 18;
const ERR: u32 = 34;
const ERR_WR: u32 = 35;
const ERR_STATUS: u32 = 51;
const DETACHED: u32 = 59;
const STAGED: u32 = 60;
const ONEOFF: u32 = 61;
const REFUSED: u32 = 62;

impl Slot {
    #[inline(always)]
    const fn pack(self) -> u64 {
        let state = match self.state {
            SlotState::Free => 0,
            SlotState::Posted => 1,
            SlotState::Done => 2,
        };
        let err = match self.err {
            None => 0,
            Some((wr, status)) => {
                let status = if status > 255 { 255 } else { status as u64 };
                (1 << ERR) | ((wr as u64) << ERR_WR) | (status << ERR_STATUS)
            }
        };
        state
            | ((self.n as u64) << N)
            | ((self.last as u64) << LAST)
            | err
            | ((self.detached as u64) << DETACHED)
            | ((self.staged as u64) << STAGED)
            | ((self.oneoff as u64) << ONEOFF)
            | ((self.refused as u64) << REFUSED)
    }

    #[inline(always)]
    fn unpack(w: u64) -> Slot {
        let bit = |b: u32| (w >> b) & 1 == 1;
        Slot {
            state: match w & 3 {
                0 => SlotState::Free,
                1 => SlotState::Posted,
                _ => SlotState::Done,
            },
            n: (w >> N) as u16,
            last: (w >> LAST) as u16,
            err: if bit(ERR) {
                Some((
                    (w >> ERR_WR) as u16,
                    ((w >> ERR_STATUS) & 0xff) as sys::ibv_wc_status,
                ))
            } else {
                None
            },
            detached: bit(DETACHED),
            staged: bit(STAGED),
            oneoff: bit(ONEOFF),
            refused: bit(REFUSED),
        }
    }
}

/// A slot table entry: a [`Slot`] in one word.
pub(super) struct SlotCell(Cell<u64>);

impl SlotCell {
    pub(super) const fn free() -> SlotCell {
        SlotCell(Cell::new(FREE.pack()))
    }

    #[inline(always)]
    pub(super) fn get(&self) -> Slot {
        Slot::unpack(self.0.get())
    }

    #[inline(always)]
    pub(super) fn set(&self, s: Slot) {
        self.0.set(s.pack());
    }

    #[inline(always)]
    pub(super) fn replace(&self, s: Slot) -> Slot {
        Slot::unpack(self.0.replace(s.pack()))
    }

    /// Whether its batch is done (one load, no unpacking).
    #[inline(always)]
    pub(super) fn is_done(&self) -> bool {
        self.0.get() & 3 == 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_round_trip_through_their_word() {
        let c = SlotCell::free();
        assert_eq!(c.get(), FREE);
        let s = Slot {
            state: SlotState::Posted,
            n: 300,
            last: 127,
            err: Some((65535, sys::IBV_WC_REM_ACCESS_ERR)),
            detached: false,
            staged: true,
            oneoff: false,
            refused: true,
        };
        c.set(s);
        assert_eq!(c.get(), s);
        assert!(!c.is_done());
        let done = Slot {
            state: SlotState::Done,
            err: None,
            detached: true,
            staged: false,
            oneoff: true,
            refused: false,
            ..s
        };
        assert_eq!(c.replace(done), s);
        assert_eq!(c.get(), done);
        assert!(c.is_done());
        // A status beyond the packed byte reads as 255, never as success.
        c.set(Slot {
            err: Some((0, 1000)),
            ..done
        });
        assert_eq!(c.get().err, Some((0, 255)));
    }
}
