use super::*;
use crate::repro::Pick;

pub(super) fn pt(series: &str, w: &str, clients: usize, mops: f64, p50: f64) -> Point {
    Point {
        series: series.into(),
        workload: w.into(),
        clients,
        coroutines: 4,
        mops,
        p50_ns: p50,
        p99_ns: p50 * 3.0,
        mean_ns: p50,
        round_trips_per_op: 2.0,
        verbs_per_op: 3.0,
        bytes_per_op: 100.0,
        server_ns_per_op: None,
        link_use: Some(0.9),
        nic_use: Some(0.1),
        server_use: None,
        offloaded_share: None,
        offload: None,
        nvm_create_bytes: None,
        nvm_update_bytes: None,
        steady: None,
        seed: 7,
        memory_nodes: 2,
        compute_nodes: 16,
        fabric: "sim".into(),
        cdf: vec![[1000.0, 0.0], [p50, 0.5], [p50 * 4.0, 1.0]],
        command: "remora bench --x, y".into(),
        build: None,
        machine: None,
    }
}

pub(super) fn paper(claims: Vec<Claim>) -> Paper {
    Paper {
        key: "t",
        name: "T",
        paper_setup: "s",
        paper_keys: None,
        setup: "s".into(),
        experiments: vec![],
        claims,
    }
}

pub(super) fn claim(
    id: &'static str,
    metric: Metric,
    up_to: bool,
    pts: Option<(Pick, Pick)>,
) -> Claim {
    Claim {
        id,
        what: "w",
        paper: (2.0, 3.0),
        metric,
        up_to,
        points: pts,
        alone: None,
        missing: "baseline not in bench",
        note: "",
        figures: None,
        across: Vec::new(),
        equal_at: Vec::new(),
    }
}

pub(super) fn exps() -> Vec<ExpReport> {
    vec![ExpReport {
        id: "e".into(),
        title: "E".into(),
        curve: true,
        charts: vec![],
        points: vec![
            pt("a", "C", 8, 4.0, 2000.0),
            pt("a", "C", 16, 6.0, 3000.0),
            pt("b", "C", 8, 1.0, 4000.0),
            pt("b", "C", 16, 3.0, 6000.0),
        ],
        failures: vec![],
    }]
}

#[test]
fn ratios_pick_the_right_points() {
    let pick = || Some((Pick::new("e", "a", "c"), Pick::new("e", "b", "C")));
    let p = paper(vec![]);
    // At the largest client count: 6 / 3.
    let r = evaluate(&p, &claim("x", Metric::Mops, false, pick()), &exps());
    assert_eq!(r.remora, Some(2.0));
    assert_eq!(r.side, "above");
    assert_eq!(r.agrees, Some(true));
    assert!(r.measured.contains("16 clients"), "{}", r.measured);
    assert!(
        r.diagnosis.contains("link bandwidth 90%"),
        "{}",
        r.diagnosis
    );
    assert!(!r.diagnosis.contains("unsteady"), "{}", r.diagnosis);
    // A point whose run's rate fell as it ran says so; a steady one does not.
    let mut e = exps();
    e[0].points[3].steady = Some(0.42);
    e[0].points[1].steady = Some(0.97);
    let r = evaluate(&p, &claim("x", Metric::Mops, false, pick()), &e);
    assert!(
        r.diagnosis.ends_with(
            "unsteady: its run's second half completed 0.42x the operations of its first"
        ),
        "{}",
        r.diagnosis
    );
    assert_eq!(
        r.diagnosis.matches("unsteady").count(),
        1,
        "{}",
        r.diagnosis
    );
    assert_eq!(r.unsteady, vec!["b: 0.42".to_string()]);
    // Up to: the best over client counts, 4 / 1.
    let r = evaluate(&p, &claim("x", Metric::Mops, true, pick()), &exps());
    assert_eq!(r.remora, Some(4.0));
    // Latency: the baseline's over the system's.
    let r = evaluate(&p, &claim("x", Metric::P50, false, pick()), &exps());
    assert_eq!(r.remora, Some(2.0));
    // Not measurable.
    let r = evaluate(&p, &claim("x", Metric::Mops, false, None), &exps());
    assert_eq!((r.remora, r.side.as_str()), (None, "none"));
    assert!(r.reason.is_empty(), "a row that agrees needs no reason");
    // The other way round the paper's side: the reason names what saturates (both
    // points use 90% of the link) and each side's cost per op.
    let swapped = Some((Pick::new("e", "b", "C"), Pick::new("e", "a", "C")));
    let r = evaluate(&p, &claim("x", Metric::Mops, false, swapped), &exps());
    assert_eq!(r.agrees, Some(false));
    assert!(r.reason.starts_with("bandwidth bound"), "{}", r.reason);
    assert!(r.reason.contains("per op: b 2.00 RT"), "{}", r.reason);
    // A latency claim lost to a system that runs more throughput: closed-loop queueing.
    let mut e = exps();
    e[0].points[1].p50_ns = 9000.0;
    e[0].points[1].mean_ns = 2000.0;
    let r = evaluate(&p, &claim("x", Metric::P50, false, pick()), &e);
    assert_eq!(r.agrees, Some(false));
    assert!(r.reason.contains("queueing (closed loop)"), "{}", r.reason);
    assert!(r.reason.contains("2.00x b's throughput"), "{}", r.reason);
    assert!(
        r.reason.contains("at the same 16 clients x 4"),
        "{}",
        r.reason
    );
    assert!(
        r.reason.contains("by mean latency the ratio is 3.00x"),
        "{}",
        r.reason
    );
    // A pick that matches nothing says so.
    let bad = Some((Pick::new("e", "zz", "C"), Pick::new("e", "b", "C")));
    let r = evaluate(&p, &claim("x", Metric::Mops, false, bad), &exps());
    assert!(r.remora.is_none() && r.missing.contains("zz"), "{r:?}");
}

/// Picks at named client counts pair across counts: one series' gain from 8 to 16
/// clients (6 / 4), not the ratio at a shared count.
#[test]
fn picks_at_client_counts_pair_across_counts() {
    let gain = Some((Pick::at("e", "a", "C", 16), Pick::at("e", "a", "C", 8)));
    let r = evaluate(
        &paper(vec![]),
        &claim("g", Metric::Mops, false, gain),
        &exps(),
    );
    assert_eq!(r.remora, Some(1.5));
    assert!(r.measured.contains("a at 8 clients"), "{}", r.measured);
    // A count nobody ran: no pair.
    let none = Some((Pick::at("e", "a", "C", 32), Pick::at("e", "a", "C", 8)));
    let r = evaluate(
        &paper(vec![]),
        &claim("g", Metric::Mops, false, none),
        &exps(),
    );
    assert!(r.remora.is_none(), "{r:?}");
}

/// A latency claim whose two picks sit at different concurrency (each system at its own
/// peak): the queueing reason states each side's operations in flight, not "the same".
#[test]
fn queueing_reason_names_each_sides_concurrency() {
    let mut e = exps();
    e[0].points[2].p50_ns = 2000.0;
    let picks = Some((Pick::at("e", "a", "C", 16), Pick::at("e", "b", "C", 8)));
    let r = evaluate(&paper(vec![]), &claim("l", Metric::P50, false, picks), &e);
    assert_eq!(r.agrees, Some(false));
    assert!(!r.reason.contains("at the same"), "{}", r.reason);
    assert!(
        r.reason.contains(
            "6.00x b's throughput with 64 operations in flight (16 clients x 4 coroutines) \
             against b's 32 (8 x 4)"
        ),
        "{}",
        r.reason
    );
}

pub(super) fn report(rows: Vec<Row>) -> Report {
    Report {
        classes: class::counts(rows.iter()),
        figure_classes: class::figure_counts(rows.iter()),
        tool: "repro".into(),
        command: "c".into(),
        scale: "quick".into(),
        papers: vec![PaperReport {
            key: "t".into(),
            name: "T".into(),
            paper_setup: "p".into(),
            setup: "s".into(),
            scale: "quick".into(),
            experiments: exps(),
            rows,
        }],
        memory: None,
        reused: Vec::new(),
    }
}

/// An "up to" row carries the sweep's smallest and largest ratio (a wrong-side point
/// shows), its class, and the paper's absolute figures beside remora's; report.md leads
/// with the class counts and shows them all.
#[test]
fn up_to_rows_show_the_sweep_and_the_papers_figures() {
    let pick = Some((Pick::new("e", "a", "C"), Pick::new("e", "b", "C")));
    let mut e = exps();
    // At 16 clients a runs below b: 2.0 / 3.0.
    e[0].points[1].mops = 2.0;
    let c =
        claim("x", Metric::Mops, true, pick).figures(Some(5.0), Some(0.5), "Fig. 9, 256 clients");
    let r = evaluate(&paper(vec![]), &c, &e);
    assert_eq!(r.remora, Some(4.0));
    assert!(r.up_to);
    let (lo, hi) = (r.sweep_min.clone().unwrap(), r.sweep_max.clone().unwrap());
    assert_eq!((lo.clients, hi.clients), (16, 8));
    assert!(
        (lo.ratio - 2.0 / 3.0).abs() < 1e-9 && hi.ratio == 4.0,
        "{lo:?} {hi:?}"
    );
    // 4.0 against 2-3x: over the nearest end, 4/3: faithful.
    assert_eq!(r.class, "faithful");
    assert!((r.of_paper.unwrap() - 4.0 / 3.0).abs() < 1e-9);
    // The figures at the sweep's largest client count (16), whichever the ratio is
    // from (the paper's are of its largest): a 2 Mops, b 3 Mops.
    assert_eq!(r.figures.len(), 2);
    assert_eq!(
        (r.figures[0].series.as_str(), r.figures[0].remora),
        ("a", Some(2.0))
    );
    assert_eq!(
        (r.figures[0].of_paper, r.figures[0].clients),
        (Some(0.4), 16)
    );
    assert_eq!(
        (r.figures[1].series.as_str(), r.figures[1].of_paper),
        ("b", Some(6.0))
    );
    assert_eq!(r.figures[1].unit, "Mops");
    // Latency figures are in µs.
    let both = Some((Pick::new("e", "a", "C"), Pick::new("e", "b", "C")));
    let l = claim("l", Metric::P50, false, both).figures(Some(3.0), None, "Fig. 10");
    let lr = evaluate(&paper(vec![]), &l, &e);
    assert_eq!(lr.figures.len(), 1);
    assert_eq!(
        lr.figures[0].remora,
        Some(3.0),
        "a's p50 at 16 clients is 3000 ns"
    );
    let md = report(vec![r.clone(), lr]).markdown();
    assert!(md.contains("Classes (remora's ratio / the paper's): faithful 2, rough 0, off 0, direction only 0, unmeasured 0"), "{md}");
    assert!(
        md.contains(
            "sweep 0.67x (16 clients) .. 4.00x (8 clients), **wrong side of 1 at 16 clients**"
        ),
        "{md}"
    );
    assert!(
        md.contains("at 16 clients: a 2.000 Mops vs paper 5.000 (0.40x, rough)"),
        "{md}"
    );
    // Each absolute figure has its class, counted apart from the rows' in the summary.
    assert!(
        md.contains(
            "absolute figures (remora's / the paper's, 3 beside 2 rows; counted apart): \
             faithful 1, rough 1, off 1, unmeasured 0"
        ),
        "{md}"
    );
    assert!(md.contains("Fig. 9, 256 clients"), "{md}");
    // The row is in report.json with its class and figures.
    let json = serde_json::to_string(&report(vec![r])).unwrap();
    for f in [
        "\"class\":\"faithful\"",
        "\"sweep_min\"",
        "\"figures\"",
        "\"classes\"",
        "\"figure_classes\":{\"faithful\":0,\"off\":1,\"rough\":1,\"unmeasured\":0}",
    ] {
        assert!(json.contains(f), "{f} in {json}");
    }
}

/// An "up to" across experiments (the paper's best over its request scales) is the best
/// ratio of the same two series in any of them; its sweep ends and its point name the
/// experiment, and the paper's absolute figures stay beside the picks' own experiment's.
#[test]
fn up_to_across_experiments_takes_the_best_of_all_of_them() {
    let pick = || Some((Pick::new("e", "a", "C"), Pick::new("e", "b", "C")));
    let mut e = exps();
    let mut other = e[0].clone();
    other.id = "e2".into();
    // In e2, a runs 9 / 1 over b at 16 clients, 0.5 / 1 at 8 (a wrong-side point).
    other.points[0].mops = 0.5;
    other.points[1].mops = 9.0;
    other.points[3].mops = 1.0;
    e.push(other);
    // Only the picks' own experiment: 4 / 1 at 8 clients.
    let own = evaluate(&paper(vec![]), &claim("x", Metric::Mops, true, pick()), &e);
    assert_eq!(own.remora, Some(4.0));
    assert_eq!(own.sweep_max.as_ref().and_then(|s| s.exp.clone()), None);
    let c = claim("x", Metric::Mops, true, pick())
        .figures(Some(5.0), None, "Fig. 9, 256 clients")
        .across(&["e2", "not-run"]);
    let r = evaluate(&paper(vec![]), &c, &e);
    assert_eq!(r.remora, Some(9.0));
    assert!(r.measured.starts_with("e2, 16 clients"), "{}", r.measured);
    let (lo, hi) = (r.sweep_min.clone().unwrap(), r.sweep_max.clone().unwrap());
    assert_eq!(
        (lo.ratio, lo.exp.as_deref(), lo.clients),
        (0.5, Some("e2"), 8)
    );
    assert_eq!(
        (hi.ratio, hi.exp.as_deref(), hi.clients),
        (9.0, Some("e2"), 16)
    );
    // The figures: a at e's largest client count (6 Mops), not e2's.
    assert_eq!(r.figures[0].remora, Some(6.0));
    let md = report(vec![r]).markdown();
    assert!(
        md.contains(
            "sweep 0.50x (e2, 8 clients) .. 9.00x (e2, 16 clients), **wrong side of 1 at e2, \
             8 clients**"
        ),
        "{md}"
    );
    // Not an "up to": the picks' own experiment at its largest client count, 6 / 3.
    let mut at_most = c.clone();
    at_most.up_to = false;
    let r = evaluate(&paper(vec![]), &at_most, &e);
    assert_eq!(r.remora, Some(2.0));
}

#[test]
fn a_ratio_near_one_agrees_only_with_a_paper_on_its_strict_side() {
    use super::evaluate::same_side;
    // The paper's "about equal, slightly above" and remora's a little further above.
    assert!(same_side(1.07, 1.02, false));
    assert!(same_side(1.02, 1.10, false));
    assert!(same_side(0.98, 1.02, false), "both within the noise band");
    // A paper clearly above is not met by a ratio just below 1, nor slightly above by below.
    assert!(!same_side(0.99, 1.34, false));
    assert!(!same_side(0.95, 1.02, false));
    assert!(!same_side(0.5, 2.0, false));
    // A paper range around 1: remora must be near it too.
    // A closeness band ("the same"): near within 0.67-1.5, the band it grades rough or
    // better; outside it, the other side.
    assert!(same_side(1.3, 1.0, true));
    assert!(same_side(0.7, 1.0, true));
    assert!(!same_side(1.6, 1.0, true));
    assert!(!same_side(0.6, 1.0, true));
    assert!(same_side(1.1, 1.0, true));
}

/// An open range from below 1 ("at least 0.97x", about the same or better) is met from its
/// bottom up, below it not; an open range above 1 still asks for the side above 1.
#[test]
fn an_open_range_from_below_one_is_met_from_its_bottom_up() {
    use super::evaluate::agrees;
    assert!(agrees(0.997, 0.97, OPEN_ENDED, false));
    assert!(agrees(0.97, 0.97, OPEN_ENDED, false));
    assert!(agrees(1.4, 0.97, OPEN_ENDED, false));
    assert!(!agrees(0.96, 0.97, OPEN_ENDED, false));
    assert!(
        agrees(1.005, 1.01, OPEN_ENDED, false),
        "near and strictly above"
    );
    assert!(!agrees(0.997, 1.01, OPEN_ENDED, false));
    assert!(agrees(9.0, 7.44, 11.15, false));
    assert!(!agrees(0.9, 7.44, 11.15, false));
}
