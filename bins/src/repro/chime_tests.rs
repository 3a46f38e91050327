//! Tests of `remora repro chime`'s plan (its commands, series and rows).
use super::ideas::{
    IDEA, IDEA_LABEL, IDEA2, IDEA2_LABEL, IDEA3, IDEA3_LABEL, IDEA23, IDEA23_LABEL,
};
use super::*;
use crate::repro::ScaleSel;

/// Every CHIME command runs with read delegation and write combining, as the authors
/// build CHIME (the bars, the cache sweep, the factor analysis); only the
/// delegation-combining rows' denominator runs without, and the Sherman bars cannot take
/// them. Every bar runs once (seed 1), in the chart's order.
#[test]
fn chime_runs_as_its_authors_build_it() {
    let p = paper(&Scale::of(ScaleSel::Quick));
    let with = |args: &str| {
        let w: Vec<&str> = args.split_whitespace().collect();
        w.windows(2)
            .any(|p| p == ["--with", "delegation,combining"])
    };
    let chime = |args: &str| args.contains("--index chime");
    let sherman = |args: &str| args.contains("--no-hopscotch");
    let v = |w: &[&'static str]| w.to_vec();
    let shape = |id: &str| -> Vec<(String, Vec<&'static str>, usize, bool)> {
        let e = p.experiments.iter().find(|e| e.id == id).unwrap();
        e.series
            .iter()
            .map(|s| {
                (
                    s.label.clone(),
                    s.workloads.clone(),
                    s.seeds.len(),
                    with(&s.args),
                )
            })
            .collect()
    };
    let row = |l: &str, w: &[&'static str], on: bool| (l.to_string(), v(w), 0, on);
    // Each bar's YCSB-A and YCSB-B split off (they run over the window).
    let (ab, cde) = (["a", "b"], ["c", "d", "e"]);
    let split = |l: &str, on: bool| [row(l, &ab, on), row(l, &cde, on)];
    assert_eq!(
        shape("chime-ycsb"),
        [
            split("CHIME", true),
            split("SMART", false),
            split("Sherman", false),
            split(WITHOUT, false),
        ]
        .concat()
    );
    assert_eq!(
        shape("chime-cache"),
        vec![
            row("CHIME cache/8.7", &["c"], true),
            row("CHIME cache/8.7", &["a"], true),
            row("CHIME cache/15", &["c"], true),
            row("CHIME cache/30", &["c"], true),
            row("Sherman cache/8.7", &["c"], false),
            row("Sherman", &["c"], false),
            row("Sherman", &["a"], false),
        ]
    );
    assert_eq!(
        shape("chime-factors"),
        vec![row("factors", &["load", "a", "b", "c", "d"], true)]
    );
    // remora's ideas: CHIME as its authors build it, with and without each, at seeds 1-3.
    let seeded = |l: &str| {
        [
            (l.to_string(), v(&ab), 3, true),
            (l.to_string(), v(&cde), 3, true),
        ]
    };
    assert_eq!(
        shape("chime-idea"),
        [
            seeded("CHIME"),
            seeded(IDEA_LABEL),
            seeded(IDEA2_LABEL),
            seeded(IDEA3_LABEL),
            seeded(IDEA23_LABEL)
        ]
        .concat()
    );
    assert_eq!(p.experiments.len(), 4);
    // Each CHIME command but the one without them has them; no Sherman command has.
    for e in &p.experiments {
        for s in &e.series {
            let a = &s.args;
            let want = chime(a) && !sherman(a) && s.label != WITHOUT;
            assert_eq!(with(a), want, "{}: {a}", s.label);
        }
    }
    // The two CHIME bars of chime-ycsb differ by the switches only.
    let e = p.experiments.iter().find(|e| e.id == "chime-ycsb").unwrap();
    let args = |l: &str| &e.series.iter().find(|s| s.label == l).unwrap().args;
    assert_eq!(
        args("CHIME").replace(&format!(" {AUTHORS}"), ""),
        *args(WITHOUT)
    );
    // The idea's two bars differ by its switch only, and their CHIME command is the
    // chime-ycsb CHIME bar's.
    let idea = p.experiments.iter().find(|e| e.id == "chime-idea").unwrap();
    let iargs = |l: &str| &idea.series.iter().find(|s| s.label == l).unwrap().args;
    assert_eq!(iargs("CHIME"), args("CHIME"));
    assert_eq!(
        iargs(IDEA_LABEL).replace(&format!(" {IDEA}"), ""),
        *args("CHIME")
    );
    assert!(!args("CHIME").contains("lean-update"));
    assert_eq!(
        iargs(IDEA2_LABEL).replace(&format!(" {IDEA2}"), ""),
        *args("CHIME")
    );
    assert!(!args("CHIME").contains("prefix-free"));
    for (label, with) in [(IDEA3_LABEL, IDEA3), (IDEA23_LABEL, IDEA23)] {
        assert_eq!(
            iargs(label).replace(&format!(" {with}"), ""),
            *args("CHIME")
        );
    }
    assert!(!args("CHIME").contains("paced-locks"));
    // The rows read their bars; only the idea rows call a switch remora's idea.
    for (id, num_pick, den_pick) in [
        ("delegation-combining-a", ("CHIME", "a"), (WITHOUT, "a")),
        ("delegation-combining-c", ("CHIME", "c"), (WITHOUT, "c")),
        ("vs-sherman-a", ("CHIME", "a"), ("Sherman", "a")),
        ("less-cache-c", ("CHIME cache/8.7", "c"), ("Sherman", "c")),
    ] {
        let c = p.claims.iter().find(|c| c.id == id).unwrap();
        let (num, den) = c.points.as_ref().unwrap();
        assert_eq!((num.series.as_str(), num.workload), num_pick, "{id}");
        assert_eq!((den.series.as_str(), den.workload), den_pick, "{id}");
    }
    for c in &p.claims {
        if c.id.starts_with("idea") {
            let (num, den) = c.points.as_ref().unwrap();
            let (kind, label, base) = [
                ("lean-update", IDEA_LABEL, "CHIME"),
                ("prefix-free", IDEA2_LABEL, "CHIME"),
                ("paced-locks", IDEA3_LABEL, "CHIME"),
                ("paced-prefix-free", IDEA23_LABEL, IDEA2_LABEL),
            ]
            .into_iter()
            .find(|(k, _, _)| c.id == format!("idea-{k}-{}", num.workload))
            .unwrap_or_else(|| panic!("{}: no idea of that name", c.id));
            assert_eq!(c.id, format!("idea-{kind}-{}", num.workload));
            assert_eq!(
                (num.exp.as_str(), num.series.as_str()),
                ("chime-idea", label)
            );
            assert_eq!(
                (den.exp.as_str(), den.series.as_str()),
                ("chime-idea", base)
            );
            assert_eq!(num.workload, den.workload);
        } else {
            assert!(
                !c.what.contains("idea") && !c.note.contains("remora's idea"),
                "{}",
                c.id
            );
        }
    }
    assert_eq!(
        p.claims.iter().filter(|c| c.id.starts_with("idea")).count(),
        17
    );
}

/// The cache sweep's commands load the keys the setup says (200k at quick, full's 500k
/// at full, tiny's own at tiny) with the LLC and caches scaled to them; the rest of the
/// report keeps its scale's keys.
#[test]
fn the_cache_sweep_runs_at_its_key_count() {
    let words = |args: &str| -> Vec<String> {
        args.split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let flag = |args: &str, f: &str| {
        let w = words(args);
        let i = w
            .iter()
            .position(|x| x == f)
            .unwrap_or_else(|| panic!("{f}: {args}"));
        w[i + 1].clone()
    };
    for (sel, keys, llc) in [
        (ScaleSel::Quick, "200000", "server_llc_lines=1311"),
        (ScaleSel::Full, "500000", "server_llc_lines=3277"),
        (ScaleSel::Tiny, "200", "server_llc_lines=64"),
    ] {
        let p = paper(&Scale::of(sel).for_paper("chime"));
        let e = p
            .experiments
            .iter()
            .find(|e| e.id == "chime-cache")
            .unwrap();
        // (series, cache MiB): 100 MB x keys / 60M over 8.7, 15, 30, and all of it.
        let cache: Vec<(String, String)> = e
            .series
            .iter()
            .map(|s| {
                assert_eq!(flag(&s.args, "--records"), keys, "{}", s.label);
                assert_eq!(flag(&s.args, "--set"), llc, "{}", s.label);
                (s.label.clone(), flag(&s.args, "--cache-mib"))
            })
            .collect();
        // A bar's YCSB-A runs in a series of its own (over the window), same cache.
        let mut cache = cache;
        cache.dedup();
        let want: Vec<(&str, f64)> = vec![
            ("CHIME cache/8.7", 8.7),
            ("CHIME cache/15", 15.0),
            ("CHIME cache/30", 30.0),
            ("Sherman cache/8.7", 8.7),
            ("Sherman", 1.0),
        ];
        let k: f64 = keys.parse().unwrap();
        let want: Vec<(String, String)> = want
            .into_iter()
            .map(|(l, d)| (l.to_string(), format!("{:.5}", 100.0 * k / 60e6 / d)))
            .collect();
        assert_eq!(cache, want, "{sel:?}");
        // The setup and the rows' note name the sweep's keys and its cache at 1/8.7.
        let said = format!("loads {keys} keys: its cache at 1/8.7 is {} MiB", want[0].1);
        assert!(p.setup.contains(&said), "{}", p.setup);
        let c = p.claims.iter().find(|c| c.id == "less-cache-a").unwrap();
        assert!(c.note.contains(&said), "{}", c.note);
        // chime-ycsb keeps the scale's own keys.
        let y = p.experiments.iter().find(|e| e.id == "chime-ycsb").unwrap();
        let own = Scale::of(sel).for_paper("chime").records.to_string();
        assert!(y.series.iter().all(|s| flag(&s.args, "--records") == own));
    }
    // 1/8.7 at quick's 10k: ~2 level-1 pages held; at the sweep's 200k: at least 50, and
    // fewer than 50 at 10% fewer keys (the smallest round key count that holds 50).
    let held = |k: u64| level1_pages(k, 1.0 / LESS_CACHE).1;
    assert!(held(10_000) < 3.0, "{}", held(10_000));
    assert!(held(SWEEP_KEYS) >= 50.0, "{}", held(SWEEP_KEYS));
    assert!(
        held(SWEEP_KEYS * 9 / 10) < 50.0,
        "{}",
        held(SWEEP_KEYS * 9 / 10)
    );
    // The share held is about the paper's (both ~half the level-1 level).
    let (nodes, h) = level1_pages(SWEEP_KEYS, 1.0 / LESS_CACHE);
    let paper = level1_share(1.0 / LESS_CACHE);
    assert!((0.4..0.6).contains(&paper), "{paper}");
    assert!(
        (h / nodes / paper - 1.0).abs() < 0.1,
        "{} {paper}",
        h / nodes
    );
}

/// YCSB-A and YCSB-B of every bar that runs them (the bars, the cache sweep, the idea) are
/// counted over the late window at every scale, without an operation budget or a counted
/// warm-up; every other workload keeps the scale's budget. The factor analysis runs its
/// workloads in one command and keeps the budget.
#[test]
fn ycsb_a_and_b_run_over_a_late_window() {
    for sel in [ScaleSel::Tiny, ScaleSel::Quick, ScaleSel::Full] {
        let s = Scale::of(sel).for_paper("chime");
        let p = paper(&s);
        let mut timed = 0;
        for e in p.experiments.iter().filter(|e| e.id != "chime-factors") {
            let sw = if e.id == "chime-cache" {
                sweep_scale(&s)
            } else {
                s.clone()
            };
            let (warm, len) = window(&sw);
            for ser in &e.series {
                let ab = ser.workloads.iter().all(|w| TIMED.contains(w));
                assert!(
                    ab || ser.workloads.iter().all(|w| !TIMED.contains(w)),
                    "{}",
                    ser.label
                );
                let win = format!("--seconds {len} --warmup-seconds {warm}");
                let budget = format!("--operations {} --warmup {}", sw.ops, sw.warmup);
                assert_eq!(ser.args.contains(&win), ab, "{}: {}", ser.label, ser.args);
                assert_eq!(
                    ser.args.contains(&budget),
                    !ab,
                    "{}: {}",
                    ser.label,
                    ser.args
                );
                assert!(!ab || !ser.args.contains("--operations"), "{}", ser.args);
                timed += usize::from(ab);
            }
        }
        // 4 bars + 2 cache-sweep bars + 5 idea bars.
        assert_eq!(timed, 11, "{sel:?}");
    }
}
