//! remora's own ideas on CHIME's experiment (`chime-idea`): the bars, each CHIME as its
//! authors build it plus one of remora's switches, and the rows that put each beside CHIME.
use super::super::report::OPEN_ENDED;
use super::super::{Claim, Metric, Pick, Series};

/// remora's own idea on CHIME (`ChimeConfig::lean_update`, `--with lean-update`): an update
/// READs only the key's neighbourhood under the leaf's lock, not the leaf prefix with it.
/// Added to the authors' build (a second `--with`, so the CHIME command is the same words).
pub(super) const IDEA: &str = "--with lean-update";
/// The idea's bar.
pub(super) const IDEA_LABEL: &str = "CHIME + lean update";
/// Seeds of the idea experiment (both bars): at 640 clients YCSB-B's ratio moves by a few per
/// cent over seeds (measured 1.020, 0.977, 1.033 at seeds 1-3).
const IDEA_SEEDS: u64 = 3;
/// The idea rows' note.
const IDEA_NOTE: &str = "remora's own idea, not CHIME's: lean updates (ChimeConfig::lean_update, \
    core/src/chime/write.rs). CHIME's writer READs, under the leaf's lock, the leaf prefix \
    (vacancy bitmap, group stamps, low key) with the key's neighbourhood in one doorbell; an \
    update in place needs neither the bitmap nor the low key, so with the switch an update \
    (KvIndex::update, YCSB's updates) READs only the neighbourhood, and the prefix after it \
    only if the key is missing. One READ verb and 32 B fewer per update: measured on YCSB-A \
    4.84 -> 4.36 verbs and 305.6 -> 289.1 B read per op (remora bench's B in/op, seed 1), \
    where CHIME's run is bound by the memory node NIC's message rate (nic_use 0.91). Both bars are CHIME as its authors build \
    it (read delegation and write combining on), at the report's cache and key count, seeds \
    1-3 (median of the per-seed ratios). Inserts (YCSB-D's, E's) and lookups are untouched: \
    rows c, d, e read exactly 1.000. The authors' CHIME READs no prefix at all: its vacancy \
    bitmap rides in its lock word, which remora's lease-owned lock words have no room for \
    (core/src/chime/mod.rs, Vacancy-aware lock), so part of what this idea wins back is a \
    READ remora's CHIME pays and the authors' does not. Tried first and dropped: posting the \
    neighbourhood READs in the doorbell of the lock's CMP_AND_SWP (FORD-style lock and \
    read, ordered after it on the one queue pair): 0.92x on YCSB-A at seed 1, since half of \
    the first CMP_AND_SWPs found the lock held at 640 clients on ~260 leaves and their \
    READs were wasted NIC work";
/// remora's second idea on CHIME (`ChimeConfig::prefix_free`, `--with prefix-free`): writers
/// READ and WRITE no leaf prefix; the stamps of the groups beside those a write rewrites come
/// from their own headers, READ in the neighbourhood's doorbell. A third bar of chime-idea.
pub(super) const IDEA2: &str = "--with prefix-free";
/// Its bar.
pub(super) const IDEA2_LABEL: &str = "CHIME + prefix-free";
/// Its rows' note.
const IDEA2_NOTE: &str = "remora's own idea, not CHIME's: prefix-free writes \
    (ChimeConfig::prefix_free, core/src/chime/write.rs). The authors' CHIME READs no prefix: \
    its vacancy bitmap rides in its lock word. remora's lock words are lease words (a 32-bit \
    client id, which a waiter fences, and a per-acquisition tag), and its writer needs more \
    of the prefix than the bitmap: the stamps of the groups beside those it rewrites (what \
    proves a READ in any segment order one moment) and the low key. With the switch the \
    stamps come from those groups' own headers (32 B each, in the doorbell that READs the \
    neighbourhood; the one after it in the same READ), inserts look for a free slot in what \
    they READ (else the whole leaf), no write logs or WRITEs the prefix, and updates READ \
    their neighbourhood alone (as lean ones). Measured at seed 1-3 (remora bench's verbs \
    and B in per op): YCSB-A as lean updates (4.84 -> 4.36 verbs, 305.6 -> 289.1 B), \
    YCSB-D 1.54 -> 1.49 verbs but 300.7 -> 304.6 B (inserts whose free slot lies past \
    their neighbourhood READ the whole leaf: without the bitmap they cannot READ just up \
    to it), so D stays at about 1x. Not with merges (refused). Both bars are CHIME as its \
    authors build it, seeds 1-3 (median of the per-seed ratios)";
/// remora's third idea on CHIME (`ShermanConfig::paced_locks`, `--with paced-locks`): a
/// waiter whose lock CAS failed tries again after the round trips the holder still needs.
pub(super) const IDEA3: &str = "--with paced-locks";
/// Its bar.
pub(super) const IDEA3_LABEL: &str = "CHIME + paced locks";
/// It on top of prefix-free writes (which READ no prefix, as the authors' writer).
pub(super) const IDEA23: &str = "--with prefix-free,paced-locks";
/// That bar.
pub(super) const IDEA23_LABEL: &str = "CHIME + prefix-free + paced locks";
/// Its rows' note.
const IDEA3_NOTE: &str = "remora's own idea, not CHIME's: paced lock waits \
    (ShermanConfig::paced_locks, core/src/sherman/pace.rs). The authors' CHIME retries a \
    failed leaf-lock CAS at once (dmemsys/CHIME src/Tree.cpp lock_node: cas_mask_sync in a \
    loop, yielding the coroutine between tries), and so does remora's CHIME as theirs: one \
    CAS per round trip per waiting compute node, each a message the memory node's NIC \
    serves, and CHIME's YCSB-A run is bound by that NIC's message rate. With the switch a \
    waiter pauses one round trip, timed on its own failed CAS, before the next: half the \
    CASes. Measured (remora bench as the bars run it, seed 1): quick scale, CAS per op \
    1.326 -> 0.974, verbs per op 4.65 -> 4.31, 23.94 -> 25.83 Mops; full scale (500k keys), \
    CAS per op 0.680 -> 0.591, 27.41 -> 27.74 Mops: there 0.46 CAS per op take a lock and \
    only 0.22 fail under the authors' spin (5% of 4.03 verbs per op), so the gain is small. \
    Every CAS saved is one the authors' build sends too, and the gain holds on top of \
    prefix-free writes (no prefix READ, as the authors' writer): rows \
    idea-paced-prefix-free-*. Not a longer pause: the release is not seen, so a lock freed \
    during the pause sits idle; exponential back-off (--lock-wait backoff, 200 ns doubling \
    to 100 us) reached 26.45 Mops on YCSB-A but 24.82 against 31.59 on YCSB-D (0.79x, \
    seed 1, its 10,000 operations), and a pause of two round trips doubling while the \
    holder stays 0.90x on D; one round trip leaves D and E within 1%";

/// The idea bars over `wl`, each over the idea seeds: CHIME as `chime` runs it (the
/// authors' build), then with each of remora's switches added.
pub(super) fn series(chime: &str, wl: &[&'static str]) -> Vec<Series> {
    [
        ("CHIME", ""),
        (IDEA_LABEL, IDEA),
        (IDEA2_LABEL, IDEA2),
        (IDEA3_LABEL, IDEA3),
        (IDEA23_LABEL, IDEA23),
    ]
    .into_iter()
    .map(|(label, with)| {
        Series::new(label, format!("{chime} {with}").trim_end().into(), wl).over_seeds(IDEA_SEEDS)
    })
    .collect()
}

/// The idea rows.
pub(super) fn claims(claims: &mut Vec<Claim>) {
    // remora's own idea on CHIME's experiment: where it acts (updates: YCSB-A, B) it should
    // beat CHIME; elsewhere (no updates: C, D, E) it must change nothing.
    for (w, id) in [
        ("a", "idea-lean-update-a"),
        ("b", "idea-lean-update-b"),
        ("c", "idea-lean-update-c"),
        ("d", "idea-lean-update-d"),
        ("e", "idea-lean-update-e"),
    ] {
        let acts = matches!(w, "a" | "b");
        let what_range = (
            if acts {
                "remora's idea (lean updates) on CHIME / CHIME, throughput (no paper figure: \
                 remora's aim, ahead of CHIME where updates are)"
            } else {
                "remora's idea (lean updates) on CHIME / CHIME, throughput (no paper figure: \
                 no updates here, so the same throughput)"
            },
            if acts {
                (1.01, OPEN_ENDED)
            } else {
                (0.99, 1.01)
            },
        );
        claims.push(row(id, w, what_range, (IDEA_LABEL, "CHIME"), IDEA_NOTE));
    }
    // remora's second idea: where updates are (A) it acts as lean updates; inserts (D, E)
    // trade the prefix's verbs for reads of whole leaves when the free slot is out of
    // reach, about even; lookups (C) untouched.
    for (w, id) in [
        ("a", "idea-prefix-free-a"),
        ("b", "idea-prefix-free-b"),
        ("c", "idea-prefix-free-c"),
        ("d", "idea-prefix-free-d"),
        ("e", "idea-prefix-free-e"),
    ] {
        let (what, range) = match w {
            "a" => (
                "remora's idea (prefix-free writes) on CHIME / CHIME, throughput (no paper \
                 figure: remora's aim, ahead of CHIME where updates are)",
                (1.01, OPEN_ENDED),
            ),
            "c" => (
                "remora's idea (prefix-free writes) on CHIME / CHIME, throughput (no paper \
                 figure: no writes here, so the same throughput)",
                (0.99, 1.01),
            ),
            _ => (
                "remora's idea (prefix-free writes) on CHIME / CHIME, throughput (no paper \
                 figure: few writes here, about the same throughput)",
                (0.97, OPEN_ENDED),
            ),
        };
        claims.push(row(
            id,
            w,
            (what, range),
            (IDEA2_LABEL, "CHIME"),
            IDEA2_NOTE,
        ));
    }
    // remora's third idea: every write that waits for a lock (A's updates most; B, D, E few
    // writes); lookups take no lock (C).
    for (w, id) in [
        ("a", "idea-paced-locks-a"),
        ("b", "idea-paced-locks-b"),
        ("c", "idea-paced-locks-c"),
        ("d", "idea-paced-locks-d"),
        ("e", "idea-paced-locks-e"),
    ] {
        let (what, range) = match w {
            "a" => (
                "remora's idea (paced lock waits) on CHIME / CHIME, throughput (no paper \
                 figure: remora's aim, ahead of CHIME where writes wait for locks)",
                (1.01, OPEN_ENDED),
            ),
            "c" => (
                "remora's idea (paced lock waits) on CHIME / CHIME, throughput (no paper \
                 figure: no locks here, so the same throughput)",
                (0.99, 1.01),
            ),
            _ => (
                "remora's idea (paced lock waits) on CHIME / CHIME, throughput (no paper \
                 figure: few writes here, about the same throughput)",
                (0.97, OPEN_ENDED),
            ),
        };
        claims.push(row(
            id,
            w,
            (what, range),
            (IDEA3_LABEL, "CHIME"),
            IDEA3_NOTE,
        ));
    }
    // The same on top of prefix-free writes, where remora's writer READs no prefix, as the
    // authors' does: the gain is not the prefix READ won back.
    for (w, id) in [
        ("a", "idea-paced-prefix-free-a"),
        ("b", "idea-paced-prefix-free-b"),
    ] {
        let what_range = (
            if w == "a" {
                "remora's idea (paced lock waits) on CHIME with prefix-free writes / CHIME \
                 with prefix-free writes, throughput (no paper figure: ahead where writes \
                 wait for locks)"
            } else {
                "remora's idea (paced lock waits) on CHIME with prefix-free writes / CHIME \
                 with prefix-free writes, throughput (no paper figure: few writes here, \
                 about the same throughput)"
            },
            if w == "a" {
                (1.01, OPEN_ENDED)
            } else {
                (0.97, OPEN_ENDED)
            },
        );
        claims.push(row(
            id,
            w,
            what_range,
            (IDEA23_LABEL, IDEA2_LABEL),
            IDEA3_NOTE,
        ));
    }
}

/// One idea row: bar `num` over bar `den` of `chime-idea`, on workload `w`.
fn row(
    id: &'static str,
    w: &'static str,
    (what, range): (&'static str, (f64, f64)),
    (num, den): (&str, &str),
    note: &'static str,
) -> Claim {
    let i = |series: &str| Pick::new("chime-idea", series, w);
    Claim::ratio(id, what, range, Metric::Mops, false, i(num), i(den), note)
}
