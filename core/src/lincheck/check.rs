//! The checker: per-key decomposition, per-key search, scan/search rules, reports.
use super::history::{Event, History, Op, Outcome, PENDING, Rect, Shown};
use super::register::{RegKind, RegOp, Searcher, Verdict};
use super::shrink::shrink;
use super::window::Timeline;
use core::fmt;
use std_alloc::format;
use std_alloc::string::String;
use std_alloc::vec::Vec;

/// How [`check`] searches a history.
#[derive(Debug, Clone, Copy)]
pub struct CheckConfig {
    /// The seed the history was generated with (printed in reports).
    pub seed: u64,
    /// Search nodes per key before the key is called inconclusive.
    pub budget: u64,
    /// Stop collecting violations after this many.
    pub max_violations: usize,
    /// Shrink register violations to a small failing sub-history.
    pub shrink: bool,
}

impl CheckConfig {
    /// The defaults for a history made with `seed`: 2M search nodes per key, 4 violations listed, shrinking on.
    pub fn new(seed: u64) -> CheckConfig {
        CheckConfig {
            seed,
            budget: 2_000_000,
            max_violations: 4,
            shrink: true,
        }
    }
}

/// Longer witnesses are not printed (the core is).
const MAX_PRINTED: usize = 40;

/// One violation: what, why, and a failing sub-history.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The seed the history was generated with.
    pub seed: u64,
    /// "key 0x…", "entry 7", "scan …".
    pub subject: String,
    /// Why no linearization exists.
    pub reason: String,
    /// The failing operations, a sub-history of the checked one.
    pub witness: History,
    /// Earlier operations of the key left out of the witness: all returned before the
    /// witness's first operation began, and the witness fails whatever state they left.
    pub omitted_before: usize,
    /// For a long witness: a shorter core found by also dropping writes. It fails from any
    /// starting state even if the witness's other writes since its first invocation may or
    /// may not have taken effect, so it is a proof too.
    pub core: Option<History>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "linearizability violation (seed {}): {}: {}",
            self.seed, self.subject, self.reason
        )?;
        if let Some(c) = &self.core {
            writeln!(
                f,
                " core ({} ops; fails from any state, whether or not the other writes \
                 of the sub-history below took effect):",
                c.events.len()
            )?;
            c.write_events(f)?;
        }
        if self.witness.events.len() > MAX_PRINTED {
            writeln!(
                f,
                " failing sub-history: {} ops (`Violation::witness`); those overlapping the \
                 core's span:",
                self.witness.events.len()
            )?;
            let (lo, hi) = self.core.as_ref().map_or((0, u64::MAX), |c| {
                let lo = c.events.iter().map(|e| e.call).min().unwrap_or(0);
                let hi = c.events.iter().map(|e| e.ret).max().unwrap_or(u64::MAX);
                (lo, hi)
            });
            let w = &self.witness;
            let near = w.events.iter().filter(|e| e.ret >= lo && e.call <= hi);
            for e in near.take(MAX_PRINTED) {
                writeln!(f, "  {}", Shown(w, e))?;
            }
            return Ok(());
        }
        if self.omitted_before == 0 {
            writeln!(
                f,
                " failing sub-history ({} ops, from the empty state):",
                self.witness.events.len()
            )?;
        } else {
            writeln!(
                f,
                " failing sub-history ({} ops; the {} earlier ops on this key, all finished \
                 before these began, are left out: it fails from any state they could leave):",
                self.witness.events.len(),
                self.omitted_before
            )?;
        }
        self.witness.write_events(f)
    }
}

/// What [`check`] found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The seed the history was generated with.
    pub seed: u64,
    /// Operations in the history.
    pub ops: usize,
    /// Keys and rectangle entries searched.
    pub keys: usize,
    /// Scans and window searches checked.
    pub scans: usize,
    /// Search nodes visited.
    pub nodes: u64,
    /// The violations found, at most [`CheckConfig::max_violations`].
    pub violations: Vec<Violation>,
    /// Further violations found but not listed (past `max_violations`).
    pub unlisted: usize,
    /// Keys/entries whose search ran out of budget (neither proven nor refuted).
    pub inconclusive: Vec<String>,
}

impl Report {
    /// No violation and nothing inconclusive.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty() && self.inconclusive.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {}: {} operations, {} keys/entries, {} scans/searches, {} search nodes, \
             {} violations, {} inconclusive",
            self.seed,
            self.ops,
            self.keys,
            self.scans,
            self.nodes,
            self.violations.len() + self.unlisted,
            self.inconclusive.len()
        )?;
        for v in &self.violations {
            write!(f, "{v}")?;
        }
        if self.unlisted > 0 {
            writeln!(f, "({} more violations not listed)", self.unlisted)?;
        }
        for k in &self.inconclusive {
            writeln!(f, "inconclusive (search budget exhausted): {k}")?;
        }
        Ok(())
    }
}

/// Which register a single-target operation acts on: keys and rectangle entries are
/// separate name spaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Target {
    Key(u64),
    Entry(u64),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Key(k) => write!(f, "key {k:#x}"),
            Target::Entry(id) => write!(f, "entry {id}"),
        }
    }
}

pub(crate) fn target(e: &Event) -> Option<Target> {
    match e.op {
        Op::Upsert { key, .. } | Op::Update { key, .. } | Op::Delete { key } | Op::Get { key } => {
            Some(Target::Key(key))
        }
        Op::Insert { id, .. } | Op::Remove { id, .. } => Some(Target::Entry(id)),
        Op::Scan { .. } | Op::Search { .. } => None,
    }
}

/// The register view of a single-target event; `Ok(None)` if it constrains nothing (a get
/// of unknown outcome), `Err` if its outcome does not fit its operation.
pub(crate) fn reg_op(e: &Event, ev: u32) -> Result<Option<RegOp>, &'static str> {
    use Outcome as O;
    let kind = match (e.op, e.outcome) {
        (Op::Upsert { value, .. }, O::Done) => RegKind::Write(value),
        (Op::Upsert { value, .. }, O::Unknown) => RegKind::MaybeWrite(value),
        (Op::Update { value, .. }, O::Present(true)) => RegKind::UpdateOk(value),
        (Op::Update { value, .. }, O::Unknown) => RegKind::MaybeUpdate(value),
        (Op::Delete { .. } | Op::Remove { .. }, O::Present(true)) => RegKind::DeleteOk,
        (Op::Update { .. } | Op::Delete { .. } | Op::Remove { .. }, O::Present(false)) => {
            RegKind::Absent
        }
        (Op::Delete { .. } | Op::Remove { .. }, O::Unknown) => RegKind::MaybeDelete,
        (Op::Get { .. }, O::Value(Some(v))) => RegKind::Read(v),
        (Op::Get { .. }, O::Value(None)) => RegKind::Absent,
        (Op::Get { .. }, O::Unknown) => return Ok(None),
        (Op::Insert { .. }, O::Done) => RegKind::Write(1),
        (Op::Insert { .. }, O::Unknown) => RegKind::MaybeWrite(1),
        _ => return Err("outcome does not fit the operation"),
    };
    let ret = if e.outcome == O::Unknown {
        PENDING
    } else {
        e.ret
    };
    Ok(Some(RegOp {
        call: e.call,
        ret,
        kind,
        event: ev,
    }))
}

/// Adds one event to its target's timeline (the scan/search rules).
fn add_to_timeline(t: &mut Timeline, e: &Event, ev: u32) {
    let s = (e.call, e.ret, ev);
    let known = e.outcome != Outcome::Unknown;
    match (e.op, e.outcome) {
        (Op::Upsert { value, .. } | Op::Update { value, .. }, o) => {
            if o == Outcome::Unknown || o == Outcome::Done || o == Outcome::Present(true) {
                t.add_write(value, s);
            }
            if known && o != Outcome::Present(false) {
                t.add_changer(s);
                t.add_proof(s);
            }
        }
        (Op::Insert { .. }, o) => {
            t.add_write(1, s);
            if known && o == Outcome::Done {
                t.add_proof(s);
            }
        }
        (Op::Delete { .. } | Op::Remove { .. }, Outcome::Present(true)) => {
            t.add_changer(s);
            t.add_removal(s);
        }
        (Op::Delete { .. } | Op::Remove { .. }, Outcome::Unknown) => t.add_removal(s),
        (Op::Get { .. }, Outcome::Value(Some(_))) => t.add_proof(s),
        _ => {}
    }
}

/// Events grouped by target: `(target, event index)` sorted.
pub(crate) fn groups(h: &History) -> Vec<(Target, u32)> {
    let mut g: Vec<(Target, u32)> = h
        .events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| target(e).map(|t| (t, i as u32)))
        .collect();
    g.sort_unstable();
    g
}

/// Checks a history (initial state: every key and entry absent).
pub fn check(h: &History, cfg: &CheckConfig) -> Report {
    let mut rep = Report {
        seed: cfg.seed,
        ops: h.events.len(),
        ..Report::default()
    };
    let g = groups(h);
    let has_reads = h
        .events
        .iter()
        .any(|e| matches!(e.op, Op::Scan { .. } | Op::Search { .. }));
    let mut searcher = Searcher::new();
    let mut regops: Vec<RegOp> = Vec::new();
    // Timelines for the scan rules: keys sorted, entries with their rectangles.
    let mut key_tl: Vec<(u64, Timeline)> = Vec::new();
    let mut ent_tl: Vec<(u64, Rect, Timeline)> = Vec::new();
    let mut i = 0;
    while i < g.len() {
        let t = g[i].0;
        let mut j = i;
        regops.clear();
        let mut tl = Timeline::default();
        let mut rect = None;
        while j < g.len() && g[j].0 == t {
            let ev = g[j].1;
            let e = &h.events[ev as usize];
            match reg_op(e, ev) {
                Ok(Some(r)) => regops.push(r),
                Ok(None) => {}
                Err(why) => {
                    let mut w = History::default();
                    w.push(*e, &[]);
                    push_violation(&mut rep, cfg, format!("{t}"), why.into(), w);
                }
            }
            if has_reads {
                add_to_timeline(&mut tl, e, ev);
            }
            if let Op::Insert { rect: r, .. } = e.op {
                rect.get_or_insert(r);
            }
            j += 1;
        }
        rep.keys += 1;
        match searcher.check(&regops, cfg.budget) {
            Verdict::Linearizable => {}
            Verdict::Inconclusive => rep.inconclusive.push(format!("{t} ({} ops)", j - i)),
            Verdict::Violation => {
                let evs: Vec<u32> = g[i..j].iter().map(|x| x.1).collect();
                let reason = format!("no linearization of its {} operations", j - i);
                if cfg.shrink && rep.violations.len() < cfg.max_violations {
                    let s = shrink(h, &evs, cfg.budget);
                    push_violation(&mut rep, cfg, format!("{t}"), reason, s.history);
                    if let Some(v) = rep.violations.last_mut() {
                        v.omitted_before = s.omitted_before;
                        v.core = s.core;
                    }
                } else {
                    let w = sub_history(h, &evs);
                    push_violation(&mut rep, cfg, format!("{t}"), reason, w);
                }
            }
        }
        if has_reads {
            tl.seal();
            match (t, rect) {
                (Target::Key(k), _) => key_tl.push((k, tl)),
                (Target::Entry(id), Some(r)) => ent_tl.push((id, r, tl)),
                (Target::Entry(_), None) => {}
            }
        }
        i = j;
    }
    rep.nodes = searcher.nodes;
    if has_reads {
        for (ev, e) in h.events.iter().enumerate() {
            if e.outcome == Outcome::Unknown {
                continue;
            }
            match e.op {
                Op::Scan { from, limit } => {
                    rep.scans += 1;
                    check_scan(h, e, ev as u32, from, limit, &key_tl, cfg, &mut rep);
                }
                Op::Search { window } => {
                    rep.scans += 1;
                    check_search(h, e, ev as u32, window, &ent_tl, cfg, &mut rep);
                }
                _ => {}
            }
        }
    }
    rep
}

fn push_violation(
    rep: &mut Report,
    cfg: &CheckConfig,
    subject: String,
    reason: String,
    w: History,
) {
    if rep.violations.len() < cfg.max_violations {
        rep.violations.push(Violation {
            seed: cfg.seed,
            subject,
            reason,
            witness: w,
            omitted_before: 0,
            core: None,
        });
    } else {
        rep.unlisted += 1;
    }
}

/// The events `evs` of `h` as a history of their own, ordered by invocation.
pub(crate) fn sub_history(h: &History, evs: &[u32]) -> History {
    let mut v: Vec<u32> = evs.to_vec();
    v.sort_by_key(|&i| (h.events[i as usize].call, i));
    v.dedup();
    let mut out = History::default();
    for i in v {
        let e = &h.events[i as usize];
        out.push(*e, h.items_of(e));
    }
    out
}

fn describe(h: &History, ev: u32) -> String {
    format!("{}", Shown(h, &h.events[ev as usize]))
}

#[allow(clippy::too_many_arguments)]
fn check_scan(
    h: &History,
    e: &Event,
    ev: u32,
    from: u64,
    limit: u32,
    tls: &[(u64, Timeline)],
    cfg: &CheckConfig,
    rep: &mut Report,
) {
    let items = h.items_of(e);
    let (a, b) = (e.call, e.ret);
    let subject = format!("scan by client {} from {from:#x}", e.client);
    let sorted = items.windows(2).all(|w| w[0].0 < w[1].0);
    if !sorted || items.len() > limit as usize || items.first().is_some_and(|x| x.0 < from) {
        let reason = "result not sorted, below `from` or over `limit`".into();
        push_violation(rep, cfg, subject, reason, sub_history(h, &[ev]));
        return;
    }
    for &(k, v) in items {
        let found = tls
            .binary_search_by_key(&k, |t| t.0)
            .ok()
            .map(|i| tls[i].1.possible(Some(v), a, b));
        let why = match found {
            Some(Ok(())) => continue,
            Some(Err(w)) => w,
            None => super::window::Impossible {
                writer: None,
                ender: None,
            },
        };
        let mut evs = Vec::from([ev]);
        evs.extend(why.writer);
        evs.extend(why.ender);
        let reason = match why.ender {
            Some(x) => format!(
                "returned {k:#x} with a value that was certainly overwritten or deleted before \
                 the scan began (by: {})",
                describe(h, x)
            ),
            None => {
                format!("returned {k:#x} with a value never written to it before the scan ended")
            }
        };
        push_violation(rep, cfg, subject.clone(), reason, sub_history(h, &evs));
    }
    let upper = if items.len() == limit as usize && limit > 0 {
        items[items.len() - 1].0
    } else {
        u64::MAX
    };
    let lo = tls.partition_point(|t| t.0 < from);
    for (k, tl) in tls[lo..].iter().take_while(|t| t.0 <= upper) {
        if items.binary_search_by_key(k, |x| x.0).is_ok() {
            continue;
        }
        if let Some(p) = tl.certain(a, b) {
            let reason = format!(
                "missed {k:#x}, present throughout the scan (since: {})",
                describe(h, p)
            );
            push_violation(rep, cfg, subject.clone(), reason, sub_history(h, &[ev, p]));
        }
    }
}

fn check_search(
    h: &History,
    e: &Event,
    ev: u32,
    window: Rect,
    tls: &[(u64, Rect, Timeline)],
    cfg: &CheckConfig,
    rep: &mut Report,
) {
    let mut ids: Vec<u64> = h.items_of(e).iter().map(|x| x.0).collect();
    ids.sort_unstable();
    let (a, b) = (e.call, e.ret);
    let subject = format!("search by client {}", e.client);
    if ids.windows(2).any(|w| w[0] == w[1]) {
        let reason = "returned an entry twice".into();
        push_violation(rep, cfg, subject, reason, sub_history(h, &[ev]));
        return;
    }
    for &id in &ids {
        let t = tls.binary_search_by_key(&id, |t| t.0).ok().map(|i| &tls[i]);
        let (ok, mut evs, why) = match t {
            None => (false, Vec::new(), "an entry never inserted"),
            Some((_, r, _)) if !r.intersects(&window) => {
                (false, Vec::new(), "an entry outside the window")
            }
            Some((_, _, tl)) => match tl.possible(None, a, b) {
                Ok(()) => (true, Vec::new(), ""),
                Err(w) => (
                    false,
                    w.writer.into_iter().chain(w.ender).collect(),
                    "an entry certainly removed before the search began",
                ),
            },
        };
        if !ok {
            evs.push(ev);
            let reason = format!("returned id {id}: {why}");
            push_violation(rep, cfg, subject.clone(), reason, sub_history(h, &evs));
        }
    }
    for (id, r, tl) in tls {
        if !r.intersects(&window) || ids.binary_search(id).is_ok() {
            continue;
        }
        if let Some(p) = tl.certain(a, b) {
            let reason = format!("missed id {id}, present throughout and in the window");
            push_violation(rep, cfg, subject.clone(), reason, sub_history(h, &[ev, p]));
        }
    }
}
