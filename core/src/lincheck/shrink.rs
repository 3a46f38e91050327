//! Shrinking a key's failing sub-history to a small one that still fails, soundly: the
//! result fails only if the original does.
//!
//! Two kinds of step keep that guarantee: (1) cutting at *quiescent* points, where every
//! earlier operation returned before every later one was invoked: all later operations are
//! dropped (they linearize after the kept ones), and all earlier ones are dropped if the rest
//! fails from *any* starting state (absent, or present with any value); (2) dropping
//! observers (gets, updates/deletes returning false), which only removes constraints. The
//! shortest failing prefix and then the latest failing start are found by bisection over the
//! quiescent points (both properties are monotone there), then observers are dropped in
//! halving chunks and singly while the rest still fails. Writes inside the window are kept:
//! dropping one could make the rest fail for a reason the original does not have (a delete
//! with nothing to delete).
use super::check::{reg_op, sub_history};
use super::history::History;
use super::register::{RegKind, RegOp, Searcher, Verdict};
use std_alloc::vec::Vec;

/// At most this many sub-history checks per shrink.
const MAX_CHECKS: usize = 2000;

/// A failing sub-history and how many earlier operations of its key it omits (when
/// nonzero, it fails from any starting state), and, when that is long, a short core.
pub(crate) struct Shrunk {
    pub history: History,
    pub omitted_before: usize,
    pub core: Option<History>,
}

/// Witnesses longer than this also get a core.
const CORE_ABOVE: usize = 12;

struct Shrinker<'a> {
    h: &'a History,
    searcher: Searcher,
    budget: u64,
    checks: usize,
    buf: Vec<RegOp>,
}

impl Shrinker<'_> {
    fn fails(&mut self, evs: &[u32], any_start: bool) -> bool {
        self.checks += 1;
        self.buf.clear();
        for &i in evs {
            if let Ok(Some(r)) = reg_op(&self.h.events[i as usize], i) {
                self.buf.push(r);
            }
        }
        !evs.is_empty()
            && self.searcher.check_from(&self.buf, self.budget, any_start) == Verdict::Violation
    }

    /// Does `evs` fail even if the writes among `maybe` may or may not have taken effect
    /// (anywhere after their invocation)? Runs out of budget: no.
    fn fails_despite(&mut self, evs: &[u32], maybe: &[u32]) -> bool {
        self.checks += 1;
        self.buf.clear();
        for &i in evs {
            if let Ok(Some(r)) = reg_op(&self.h.events[i as usize], i) {
                self.buf.push(r);
            }
        }
        for &i in maybe {
            if let Ok(Some(mut r)) = reg_op(&self.h.events[i as usize], i) {
                r.kind = match r.kind {
                    RegKind::Write(v) | RegKind::MaybeWrite(v) => RegKind::MaybeWrite(v),
                    RegKind::UpdateOk(v) | RegKind::MaybeUpdate(v) => RegKind::MaybeUpdate(v),
                    RegKind::DeleteOk | RegKind::MaybeDelete => RegKind::MaybeDelete,
                    RegKind::Read(_) | RegKind::Absent => continue,
                };
                r.ret = super::history::PENDING;
                self.buf.push(r);
            }
        }
        self.searcher.check_from(&self.buf, CORE_BUDGET, true) == Verdict::Violation
    }
}

/// Search nodes per check while looking for a core.
const CORE_BUDGET: u64 = 20_000;

fn is_observer(h: &History, ev: u32) -> bool {
    matches!(
        reg_op(&h.events[ev as usize], ev),
        Ok(Some(RegOp {
            kind: RegKind::Read(_) | RegKind::Absent,
            ..
        }))
    )
}

/// A small failing sub-history of the key made of `evs` (which fails from the empty state).
pub(crate) fn shrink(h: &History, evs: &[u32], budget: u64) -> Shrunk {
    let mut s = Shrinker {
        h,
        searcher: Searcher::new(),
        budget,
        checks: 0,
        buf: Vec::new(),
    };
    let mut cur: Vec<u32> = evs
        .iter()
        .copied()
        .filter(|&i| matches!(reg_op(&h.events[i as usize], i), Ok(Some(_))))
        .collect();
    let span = |i: u32| {
        let r = reg_op(&h.events[i as usize], i).ok().flatten();
        r.map(|r| (r.call, r.ret)).unwrap_or((0, 0))
    };
    cur.sort_by_key(|&i| (span(i), i));
    // Quiescent points: positions p where every op before p returned before cur[p] began.
    let mut cuts = Vec::from([0usize]);
    let mut max_ret = 0u64;
    for (p, &i) in cur.iter().enumerate() {
        let (call, ret) = span(i);
        if p > 0 && max_ret < call {
            cuts.push(p);
        }
        max_ret = max_ret.max(ret);
    }
    cuts.push(cur.len());
    // Shortest failing prefix ending at a quiescent point.
    let (mut lo, mut hi) = (1, cuts.len() - 1);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if s.fails(&cur[..cuts[mid]], false) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let end = cuts[hi];
    // Latest quiescent start from which the rest fails whatever the starting state.
    let (mut lo, mut hi2) = (0usize, hi);
    while lo < hi2 {
        let mid = (lo + hi2).div_ceil(2);
        if mid < hi && s.fails(&cur[cuts[mid]..end], true) {
            lo = mid;
        } else {
            hi2 = mid - 1;
        }
    }
    let (start, any) = if lo > 0 || s.fails(&cur[..end], true) {
        (cuts[lo], true)
    } else {
        (0, false)
    };
    let omitted_before = start;
    let mut win: Vec<u32> = cur[start..end].to_vec();
    // Drop observers while it still fails.
    let mut chunk = win.len() / 2;
    while chunk >= 1 && s.checks < MAX_CHECKS {
        let mut i = 0;
        while i < win.len() && s.checks < MAX_CHECKS {
            let stop = (i + chunk).min(win.len());
            if !win[i..stop].iter().any(|&e| is_observer(h, e)) {
                i = stop;
                continue;
            }
            let cand: Vec<u32> = win[..i]
                .iter()
                .chain(win[i..stop].iter().filter(|&&e| !is_observer(h, e)))
                .chain(&win[stop..])
                .copied()
                .collect();
            if s.fails(&cand, any) {
                win = cand;
            } else {
                i = stop;
            }
        }
        chunk /= 2;
    }
    let core = (win.len() > CORE_ABOVE).then(|| {
        let c = core_of(&mut s, &win);
        sub_history(h, &c)
    });
    Shrunk {
        history: sub_history(h, &win),
        omitted_before,
        core,
    }
}

/// Drops gets whose value no remaining op writes (they would fail for a trivial reason).
fn close(h: &History, evs: &mut Vec<u32>) {
    let mut written: Vec<u64> = Vec::new();
    for &i in evs.iter() {
        if let Ok(Some(r)) = reg_op(&h.events[i as usize], i) {
            match r.kind {
                RegKind::Write(v)
                | RegKind::UpdateOk(v)
                | RegKind::MaybeWrite(v)
                | RegKind::MaybeUpdate(v) => written.push(v),
                _ => {}
            }
        }
    }
    written.sort_unstable();
    evs.retain(|&i| match reg_op(&h.events[i as usize], i) {
        Ok(Some(RegOp {
            kind: RegKind::Read(v),
            ..
        })) => written.binary_search(&v).is_ok(),
        _ => true,
    });
}

/// A small core that is still a proof: delta debugging over every operation (writes too,
/// each dropped with the gets of its value). A drop is kept only if the rest fails from any
/// starting state even when every dropped write that returned after the rest's first
/// invocation may or may not have taken effect (anywhere after its invocation). Sound: in a
/// linearization of the witness, the state just before the core's first operation is some
/// state, dropped writes finished before that invocation are linearized before it, and the
/// other dropped writes either take effect at their own point or before the start; dropped
/// observers only remove constraints. A drop the search cannot settle within its budget is
/// not kept.
fn core_of(s: &mut Shrinker<'_>, win: &[u32]) -> Vec<u32> {
    let h = s.h;
    let mut cur = win.to_vec();
    let mut dropped: Vec<u32> = Vec::new();
    let mut chunk = cur.len() / 2;
    while chunk >= 1 && s.checks < MAX_CHECKS * 2 {
        let mut i = 0;
        while i < cur.len() && s.checks < MAX_CHECKS * 2 {
            let stop = (i + chunk).min(cur.len());
            let mut cand: Vec<u32> = cur[..i].iter().chain(&cur[stop..]).copied().collect();
            close(h, &mut cand);
            let first = cand
                .iter()
                .map(|&e| h.events[e as usize].call)
                .min()
                .unwrap_or(0);
            let maybe: Vec<u32> = dropped
                .iter()
                .chain(&cur[i..stop])
                .copied()
                .filter(|&e| !is_observer(h, e) && h.events[e as usize].ret >= first)
                .collect();
            if s.fails(&cand, true) && s.fails_despite(&cand, &maybe) {
                dropped.extend(cur[i..stop].iter().filter(|&&e| !is_observer(h, e)));
                cur = cand;
            } else {
                i = stop;
            }
        }
        chunk /= 2;
    }
    cur
}
