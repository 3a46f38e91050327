//! The per-key search: is one key's (or one rectangle entry's) sub-history linearizable
//! with respect to a register that is absent or holds a value?
//!
//! Depth-first search for a linearization (Wing & Gong) with just-in-time linearization
//! (Lowe): at each node the candidates are the unlinearized operations invoked no later
//! than the earliest response among unlinearized operations; the search fails a branch when
//! no candidate applies. Nodes are memoized by (linearized set, state); the set is a pair of
//! 64-bit Zobrist hashes updated incrementally. Reductions (both preserve the existence of a
//! linearization):
//! - *greedy observers*: an operation that does not change the state (get, update/delete
//!   returning false) and agrees with it is linearized at once, without branching: given any
//!   linearization from this node, moving that observer to the front is still one (it is a
//!   candidate, so nothing must precede it, and it leaves the state as it was);
//! - *no lost reads*: a state change that would overwrite a value still awaited by an
//!   unlinearized get is not tried when that value has at most one writer (it cannot come
//!   back).
//!
//! Unknown-outcome writes may be applied once, anywhere after their invocation, or never;
//! an unknown update or delete is only tried where it would change the state (elsewhere it
//! is the same as never). Unknown-outcome gets are dropped before the search.
use super::memo::{FpSet, mix};
use std_alloc::vec::Vec;

/// One operation as the register sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegKind {
    /// Blind write (upsert, insert).
    Write(u64),
    /// Write that requires presence (update returning true).
    UpdateOk(u64),
    /// Removal that requires presence (delete/remove returning true).
    DeleteOk,
    /// Observes absence (get -> None, update/delete/remove -> false).
    Absent,
    /// Observes a value (get -> Some).
    Read(u64),
    /// Unknown-outcome upsert/insert.
    MaybeWrite(u64),
    /// Unknown-outcome update.
    MaybeUpdate(u64),
    /// Unknown-outcome delete/remove.
    MaybeDelete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegOp {
    pub call: u64,
    /// `PENDING` for the unknown kinds.
    pub ret: u64,
    pub kind: RegKind,
    /// The event this came from (for reports).
    pub event: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    Violation,
    /// The search budget ran out: neither proven nor refuted.
    Inconclusive,
}

const ABSENT: u32 = u32::MAX;

#[derive(Clone, Copy, PartialEq, Eq)]
enum K {
    Write,
    UpdateOk,
    DeleteOk,
    Absent,
    Read,
    MWrite,
    MUpdate,
    MDelete,
}

#[derive(Clone, Copy)]
struct Node {
    call: u64,
    ret: u64,
    k: K,
    v: u32,
    /// Try order among candidates: the earliest response of the op or of a get of its value.
    prio: u64,
}

struct Frame {
    log_start: usize,
    cand_start: usize,
    cand_next: usize,
    m: usize,
    state: u32,
    /// The candidate applied below this frame (undone before the next is tried).
    applied: Option<u32>,
    /// `m` after the greedy closure (restored when the applied candidate is undone).
    m_greedy: usize,
}

/// Reusable search buffers (one per checking thread).
pub struct Searcher {
    memo: FpSet,
    pub nodes: u64,
}

impl Default for Searcher {
    fn default() -> Self {
        Searcher::new()
    }
}

struct S<'a> {
    ops: Vec<Node>,
    un: Vec<Node>,
    lin: Vec<bool>,
    ulin: Vec<bool>,
    pending_reads: Vec<u32>,
    writers: Vec<u32>,
    m: usize,
    state: u32,
    h: (u64, u64),
    log: Vec<u32>,
    cands: Vec<u32>,
    memo: &'a mut FpSet,
    nodes: u64,
}

fn z(i: u32, lane: u64) -> u64 {
    mix((i as u64) << 1 | lane ^ 0x5EED_0000_0000)
}

impl Searcher {
    pub fn new() -> Searcher {
        Searcher {
            memo: FpSet::new(),
            nodes: 0,
        }
    }

    /// Searches for a linearization of `ops` from the absent state, visiting at most
    /// `budget` nodes.
    pub fn check(&mut self, ops: &[RegOp], budget: u64) -> Verdict {
        self.check_from(ops, budget, false)
    }

    /// As [`Searcher::check`]; with `any_start`, the register may start in any state
    /// (absent, present with a value no operation here writes, or with one of the values
    /// read but not written here): the sub-history follows omitted earlier operations.
    pub fn check_from(&mut self, ops: &[RegOp], budget: u64, any_start: bool) -> Verdict {
        let mut values: Vec<u64> = ops
            .iter()
            .filter_map(|o| match o.kind {
                RegKind::Write(v)
                | RegKind::UpdateOk(v)
                | RegKind::MaybeWrite(v)
                | RegKind::MaybeUpdate(v)
                | RegKind::Read(v) => Some(v),
                _ => None,
            })
            .collect();
        values.sort_unstable();
        values.dedup();
        let anon = values.len() as u32;
        let vid = |v: u64| values.binary_search(&v).map(|i| i as u32).unwrap_or(anon);
        // One extra value: "present, with a value nothing here writes or reads".
        let mut writers = std_alloc::vec![0u32; values.len() + 1];
        let mut pending_reads = std_alloc::vec![0u32; values.len() + 1];
        let mut known = Vec::with_capacity(ops.len());
        let mut un = Vec::new();
        for o in ops {
            let (k, v) = match o.kind {
                RegKind::Write(v) => (K::Write, vid(v)),
                RegKind::UpdateOk(v) => (K::UpdateOk, vid(v)),
                RegKind::DeleteOk => (K::DeleteOk, ABSENT),
                RegKind::Absent => (K::Absent, ABSENT),
                RegKind::Read(v) => (K::Read, vid(v)),
                RegKind::MaybeWrite(v) => (K::MWrite, vid(v)),
                RegKind::MaybeUpdate(v) => (K::MUpdate, vid(v)),
                RegKind::MaybeDelete => (K::MDelete, ABSENT),
            };
            let n = Node {
                call: o.call,
                ret: o.ret.max(o.call),
                k,
                v,
                prio: o.ret.max(o.call),
            };
            match k {
                K::Write | K::UpdateOk | K::MWrite | K::MUpdate => writers[v as usize] += 1,
                K::Read => pending_reads[v as usize] += 1,
                _ => {}
            }
            if matches!(k, K::MWrite | K::MUpdate | K::MDelete) {
                un.push(n);
            } else {
                known.push(n);
            }
        }
        // A write is due when its value is first read.
        let mut read_due = std_alloc::vec![u64::MAX; values.len() + 1];
        for n in known.iter().filter(|n| n.k == K::Read) {
            read_due[n.v as usize] = read_due[n.v as usize].min(n.ret);
        }
        for n in known.iter_mut().chain(un.iter_mut()) {
            if matches!(n.k, K::Write | K::UpdateOk | K::MWrite | K::MUpdate) {
                n.prio = n.prio.min(read_due[n.v as usize]);
            }
        }
        known.sort_by_key(|n| (n.call, n.ret));
        un.sort_by_key(|n| n.call);
        let mut starts = Vec::from([ABSENT]);
        if any_start {
            starts.extend((0..=values.len() as u32).filter(|&v| writers[v as usize] == 0));
        }
        let mut s = S {
            lin: Vec::from_iter(core::iter::repeat_n(false, known.len())),
            ulin: Vec::from_iter(core::iter::repeat_n(false, un.len())),
            ops: known,
            un,
            pending_reads,
            writers,
            m: 0,
            state: ABSENT,
            h: (0, 0),
            log: Vec::new(),
            cands: Vec::new(),
            memo: &mut self.memo,
            nodes: 0,
        };
        let mut verdict = Verdict::Violation;
        for st in starts {
            s.memo.clear();
            s.state = st;
            match s.run(budget) {
                Verdict::Linearizable => {
                    verdict = Verdict::Linearizable;
                    break;
                }
                Verdict::Inconclusive => verdict = Verdict::Inconclusive,
                Verdict::Violation => {}
            }
            if verdict == Verdict::Inconclusive {
                break;
            }
        }
        self.nodes += s.nodes;
        verdict
    }
}

enum Expand {
    Success,
    Dead,
    Pushed(Frame),
    OutOfBudget,
}

impl S<'_> {
    fn run(&mut self, budget: u64) -> Verdict {
        let mut frames: Vec<Frame> = Vec::new();
        match self.expand(budget) {
            Expand::Success => return Verdict::Linearizable,
            Expand::Dead => return Verdict::Violation,
            Expand::OutOfBudget => return Verdict::Inconclusive,
            Expand::Pushed(f) => frames.push(f),
        }
        while let Some(top) = frames.last_mut() {
            if let Some(c) = top.applied.take() {
                self.unapply(c);
                self.state = top.state;
                self.m = top.m_greedy;
            }
            if top.cand_next == self.cands.len() {
                let f = frames.pop().expect("top frame");
                self.undo_greedy(&f);
                self.cands.truncate(f.cand_start);
                continue;
            }
            let c = self.cands[top.cand_next];
            top.cand_next += 1;
            top.applied = Some(c);
            self.apply(c);
            match self.expand(budget) {
                Expand::Success => return Verdict::Linearizable,
                Expand::Dead => {}
                Expand::OutOfBudget => return Verdict::Inconclusive,
                Expand::Pushed(f) => frames.push(f),
            }
        }
        Verdict::Violation
    }

    /// End of the candidate window from `m`, and the earliest unlinearized response.
    fn window(&self) -> (usize, u64) {
        let mut min_ret = u64::MAX;
        let mut i = self.m;
        while i < self.ops.len() && self.ops[i].call <= min_ret {
            if !self.lin[i] {
                min_ret = min_ret.min(self.ops[i].ret);
            }
            i += 1;
        }
        (i, min_ret)
    }

    fn fingerprint(&self) -> u128 {
        let a = self.h.0 ^ mix(self.state as u64 ^ 0xA5A5_0000);
        let b = self.h.1 ^ mix(self.state as u64 ^ 0x5A5A_0000_0000);
        (a as u128) << 64 | b as u128
    }

    fn mark(&mut self, c: u32) {
        self.h.0 ^= z(c, 0);
        self.h.1 ^= z(c, 1);
        let n = self.ops.len();
        if (c as usize) < n {
            let i = c as usize;
            self.lin[i] = true;
            if self.ops[i].k == K::Read {
                self.pending_reads[self.ops[i].v as usize] -= 1;
            }
            while self.m < n && self.lin[self.m] {
                self.m += 1;
            }
        } else {
            self.ulin[c as usize - n] = true;
        }
    }

    fn unmark(&mut self, c: u32) {
        self.h.0 ^= z(c, 0);
        self.h.1 ^= z(c, 1);
        let n = self.ops.len();
        if (c as usize) < n {
            let i = c as usize;
            self.lin[i] = false;
            if self.ops[i].k == K::Read {
                self.pending_reads[self.ops[i].v as usize] += 1;
            }
        } else {
            self.ulin[c as usize - n] = false;
        }
    }

    fn node(&self, c: u32) -> Node {
        let n = self.ops.len();
        if (c as usize) < n {
            self.ops[c as usize]
        } else {
            self.un[c as usize - n]
        }
    }

    fn apply(&mut self, c: u32) {
        let nd = self.node(c);
        self.state = match nd.k {
            K::Write | K::UpdateOk | K::MWrite | K::MUpdate => nd.v,
            K::DeleteOk | K::MDelete => ABSENT,
            K::Absent | K::Read => self.state,
        };
        self.mark(c);
    }

    fn unapply(&mut self, c: u32) {
        self.unmark(c);
    }

    fn undo_greedy(&mut self, f: &Frame) {
        while self.log.len() > f.log_start {
            let c = self.log.pop().expect("log entry");
            self.unmark(c);
        }
        self.m = f.m;
        self.state = f.state;
    }

    /// Would changing the state now lose a value an unlinearized get still needs?
    fn loses_read(&self) -> bool {
        let s = self.state;
        s != ABSENT && self.pending_reads[s as usize] > 0 && self.writers[s as usize] <= 1
    }

    fn expand(&mut self, budget: u64) -> Expand {
        let mut f = Frame {
            log_start: self.log.len(),
            cand_start: self.cands.len(),
            cand_next: self.cands.len(),
            m: self.m,
            state: self.state,
            applied: None,
            m_greedy: self.m,
        };
        // Greedy observers.
        loop {
            let (end, min_ret) = self.window();
            let mut changed = false;
            for i in self.m..end {
                let nd = self.ops[i];
                if self.lin[i] || nd.call > min_ret {
                    continue;
                }
                let ok = match nd.k {
                    K::Absent => self.state == ABSENT,
                    K::Read => self.state == nd.v,
                    _ => false,
                };
                if ok {
                    self.mark(i as u32);
                    self.log.push(i as u32);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        if self.m == self.ops.len() {
            return Expand::Success;
        }
        self.nodes += 1;
        if self.nodes > budget {
            return Expand::OutOfBudget;
        }
        if !self.memo.insert(self.fingerprint()) {
            self.undo_greedy(&f);
            return Expand::Dead;
        }
        f.m_greedy = self.m;
        let (end, min_ret) = self.window();
        let present = self.state != ABSENT;
        let loses = self.loses_read();
        if !loses {
            for i in self.m..end {
                let nd = self.ops[i];
                if self.lin[i] || nd.call > min_ret {
                    continue;
                }
                let ok = match nd.k {
                    K::Write => true,
                    K::UpdateOk | K::DeleteOk => present,
                    _ => false,
                };
                if ok {
                    self.cands.push(i as u32);
                }
            }
            let n = self.ops.len();
            for j in 0..self.un.len() {
                let nd = self.un[j];
                if nd.call > min_ret {
                    break;
                }
                if self.ulin[j] {
                    continue;
                }
                let ok = match nd.k {
                    K::MWrite => true,
                    K::MUpdate | K::MDelete => present,
                    _ => false,
                };
                if ok {
                    self.cands.push((n + j) as u32);
                }
            }
        }
        if self.cands.len() == f.cand_start {
            self.undo_greedy(&f);
            return Expand::Dead;
        }
        // Earliest due first (a write is due when its own response or the first get of its
        // value is); unknown-outcome operations are due when their value is read, if ever.
        let ops = &self.ops;
        let un = &self.un;
        self.cands[f.cand_start..].sort_by_key(|&c| {
            if (c as usize) < ops.len() {
                ops[c as usize].prio
            } else {
                un[c as usize - ops.len()].prio
            }
        });
        Expand::Pushed(f)
    }
}
