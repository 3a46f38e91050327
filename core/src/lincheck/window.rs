//! Interval rules for non-atomic reads of many keys (scans, window searches).
//!
//! For one key (or rectangle entry) and a read interval `[a, b]` (the scan's invocation and
//! response stamps), with `x` precedes `y` iff `x.ret < y.call`:
//!
//! - **possible(v)**: the key may hold `v` at some point of `[a, b]` unless every write `w`
//!   of `v` either was invoked after `b`, or is followed by a *known* state change `x`
//!   (`w.ret < x.call`) that completed before the scan (`x.ret < a`). Sound: in any
//!   linearization, at a point `t` in `[a, b]` the last state change before `t` cannot be such
//!   a `w` (its `x` comes after it and before `a`), so the key does not hold `v`. For keys the
//!   state changes are upserts, updates returning true and deletes returning true (values are
//!   unique, so any of them ends `v`); for rectangle entries they are removes returning true
//!   (a re-insert keeps the entry present, and counts as a write).
//! - **certain**: the key is present at every point of `[a, b]` if some operation proving
//!   presence (upsert/insert, update returning true, get returning a value) returned before
//!   `a`, and no removal (delete/remove returning true, or of unknown outcome) can be
//!   linearized after the latest-invoked such proof `p` and before `b`: every removal `d`
//!   has `d.ret < p.call` or `d.call > b`. Sound: `p` is linearized before `a`, and the key
//!   stays present until a removal that would have to lie in that window.
use std_alloc::vec::Vec;

/// `(call, ret, event)` of an operation.
pub type Span = (u64, u64, u32);

/// One key's operations, indexed for the two rules.
#[derive(Debug, Default, Clone)]
pub struct Timeline {
    /// Writes `(value, span)`, sorted by value.
    writes: Vec<(u64, Span)>,
    /// Known state changes sorted by call, and the suffix minimum of their responses.
    changers: Vec<Span>,
    chg_min: Vec<(u64, u32)>,
    /// Presence proofs sorted by response, and the prefix maximum of their invocations.
    proofs: Vec<Span>,
    proof_max: Vec<(u64, u32)>,
    /// Removals sorted by call, and the prefix maximum of their responses.
    removals: Vec<Span>,
    rem_max: Vec<u64>,
}

/// Why a value is impossible: its writer (if any) and the state change that ended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Impossible {
    pub writer: Option<u32>,
    pub ender: Option<u32>,
}

impl Timeline {
    pub fn add_write(&mut self, value: u64, s: Span) {
        self.writes.push((value, s));
    }
    pub fn add_changer(&mut self, s: Span) {
        self.changers.push(s);
    }
    pub fn add_proof(&mut self, s: Span) {
        self.proofs.push(s);
    }
    pub fn add_removal(&mut self, s: Span) {
        self.removals.push(s);
    }

    /// Sorts and builds the prefix/suffix tables; call once after adding.
    pub fn seal(&mut self) {
        self.writes.sort_unstable();
        self.changers.sort_unstable();
        self.chg_min = Vec::with_capacity(self.changers.len());
        let mut best = (u64::MAX, u32::MAX);
        for s in self.changers.iter().rev() {
            if s.1 < best.0 {
                best = (s.1, s.2);
            }
            self.chg_min.push(best);
        }
        self.chg_min.reverse();
        self.proofs.sort_unstable_by_key(|s| (s.1, s.0));
        self.proof_max = Vec::with_capacity(self.proofs.len());
        let mut best = (0u64, u32::MAX);
        for s in &self.proofs {
            if s.0 >= best.0 || best.1 == u32::MAX {
                best = (s.0, s.2);
            }
            self.proof_max.push(best);
        }
        self.removals.sort_unstable();
        self.rem_max = Vec::with_capacity(self.removals.len());
        let mut m = 0u64;
        for s in &self.removals {
            m = m.max(s.1);
            self.rem_max.push(m);
        }
    }

    /// May the key hold `value` (any value if `None`) at some point of `[a, b]`?
    /// `Err` names the evidence when it certainly did not.
    pub fn possible(&self, value: Option<u64>, a: u64, b: u64) -> Result<(), Impossible> {
        let ws: &[(u64, Span)] = match value {
            Some(v) => {
                let lo = self.writes.partition_point(|w| w.0 < v);
                let hi = self.writes.partition_point(|w| w.0 <= v);
                &self.writes[lo..hi]
            }
            None => &self.writes,
        };
        let mut why = Impossible {
            writer: None,
            ender: None,
        };
        for &(_, (call, ret, ev)) in ws {
            if call > b {
                continue;
            }
            let i = self.changers.partition_point(|x| x.0 <= ret);
            match self.chg_min.get(i) {
                Some(&(xret, xev)) if xret < a => {
                    why = Impossible {
                        writer: Some(ev),
                        ender: Some(xev),
                    }
                }
                _ => return Ok(()),
            }
        }
        Err(why)
    }

    /// If the key is certainly present at every point of `[a, b]`, the proof's event.
    pub fn certain(&self, a: u64, b: u64) -> Option<u32> {
        let i = self.proofs.partition_point(|p| p.1 < a);
        if i == 0 {
            return None;
        }
        let (pcall, pev) = self.proof_max[i - 1];
        let j = self.removals.partition_point(|d| d.0 <= b);
        if j > 0 && self.rem_max[j - 1] >= pcall {
            return None;
        }
        Some(pev)
    }
}
