//! Tests of `remora repro smart`'s plan (its commands, series and rows).
use super::*;
use crate::repro::{ScaleSel, seeded_workload};

/// The factor analysis's LOAD and SMART's and Sherman's YCSB-A curves run at seeds 1-5
/// (the write-throughput, write-latency and factor-lock-free rows' points), every other
/// run once: the YCSB bars too, which no seeded row reads since write-latency reads the
/// curves.
#[test]
fn only_the_seed_noisy_runs_go_over_seeds() {
    let p = paper(&Scale::of(ScaleSel::Quick));
    let e = p
        .experiments
        .iter()
        .find(|e| e.id == "smart-ycsb-int")
        .unwrap();
    let shape: Vec<(&str, Vec<&str>, usize)> = e
        .series
        .iter()
        .map(|s| (s.label.as_str(), s.workloads.clone(), s.seeds.len()))
        .collect();
    let v = |w: &[&'static str]| w.to_vec();
    assert_eq!(
        shape,
        vec![
            ("SMART", v(ALL), 0),
            ("Sherman", v(ALL), 0),
            ("ART on DM", v(ALL), 0),
        ]
    );
    // The factor analysis's LOAD (factor-lock-free) over seeds, its other workloads
    // once; every other experiment runs once.
    let f = p.experiments.iter().find(|e| e.id == "smart-factors");
    let shape: Vec<(Vec<&str>, usize)> = f
        .unwrap()
        .series
        .iter()
        .map(|s| (s.workloads.clone(), s.seeds.len()))
        .collect();
    assert_eq!(
        shape,
        vec![(v(&["load"]), 5), (v(&["a", "b", "c", "d"]), 0)]
    );
    assert!(f.unwrap().series[0].args.ends_with("--workloads load"));
    // The YCSB-A curves of SMART and Sherman (the write-throughput row's peaks) over
    // seeds, ART on DM's once; the YCSB-C curves, the string-key bars and the unloaded
    // runs once.
    let curves = |id: &str| -> Vec<(String, usize)> {
        let e = p.experiments.iter().find(|e| e.id == id).unwrap();
        let s = e.series.iter();
        s.map(|s| (s.label.clone(), s.seeds.len())).collect()
    };
    let l = |v: [(&str, usize); 3]| v.map(|(a, n)| (a.to_string(), n)).to_vec();
    assert_eq!(
        curves("smart-clients-a"),
        l([("SMART", 5), ("Sherman", 5), ("ART on DM", 0)])
    );
    assert_eq!(
        curves("smart-clients-c"),
        l([("SMART", 0), ("Sherman", 0), ("ART on DM", 0)])
    );
    let seeded = ["smart-factors", "smart-clients-a"];
    for x in p.experiments.iter() {
        if !seeded.contains(&x.id.as_str()) {
            assert!(x.series.iter().all(|s| s.seeds.is_empty()), "{}", x.id);
        }
    }
    // A workload at either end splits into two series; an unlisted label stays whole.
    let s = |l: &str| Series::new(l, "--x".into(), &["a", "b"]);
    let out = seeded_workload(vec![s("A"), s("B")], &["A"], "a", SEEDS);
    let shape: Vec<_> = out
        .iter()
        .map(|s| (s.label.as_str(), s.workloads.clone(), s.seeds.clone()))
        .collect();
    assert_eq!(
        shape,
        vec![
            ("A", vec!["a"], vec![1, 2, 3, 4, 5]),
            ("A", vec!["b"], vec![]),
            ("B", vec!["a", "b"], vec![]),
        ]
    );
}

/// The factor analysis runs every step at the authors' factor shape, 16 compute nodes x
/// 24 threads x 2 coroutines (exp/params/fig_15.json, exp/fig_15.py), not the bars'.
#[test]
fn factors_run_at_the_authors_shape() {
    let p = paper(&Scale::of(ScaleSel::Quick));
    let e = p.experiments.iter().find(|e| e.id == "smart-factors");
    let series = &e.unwrap().series;
    assert_eq!(series.len(), 2);
    for s in series {
        for flag in [
            "--compute-nodes 16 ",
            "--clients-per-node 24 ",
            "--coroutines 2 ",
            "--warmup 153600 ",
            "--seconds 0.002 ",
        ] {
            assert!(s.args.contains(flag), "{flag}: {}", s.args);
        }
    }
    // The bars keep their own shape.
    let bars = p.experiments.iter().find(|e| e.id == "smart-ycsb-int");
    let args = &bars.unwrap().series[0].args;
    assert!(
        args.contains("--clients-per-node 4 --coroutines 4"),
        "{args}"
    );
}

/// Row write-latency is the paper's figure's metric at its points: the p99 (fig_11.py
/// plots p99_lat) of SMART's and Sherman's YCSB-A curves, each at its largest client
/// count, the very points of the write-throughput row; not a p50, not the bars.
#[test]
fn write_latency_is_the_curves_p99_at_the_throughput_rows_points() {
    let p = paper(&Scale::of(ScaleSel::Quick));
    let row = |id: &str| p.claims.iter().find(|c| c.id == id).unwrap();
    let lat = row("write-latency");
    let tput = row("write-throughput");
    assert_eq!(lat.metric, Metric::P99);
    let (ln, ld) = lat.points.clone().unwrap();
    let (tn, td) = tput.points.clone().unwrap();
    for (l, t) in [(&ln, &tn), (&ld, &td)] {
        assert_eq!(
            (l.exp.as_str(), l.series.as_str(), l.workload, l.clients),
            (t.exp.as_str(), t.series.as_str(), t.workload, t.clients)
        );
    }
    assert_eq!(
        (ln.exp.as_str(), ln.series.as_str()),
        ("smart-clients-a", "SMART")
    );
    assert_eq!(ld.series, "Sherman");
    // The peaks: 16 nodes x 24 threads (quick's last sweep point) and 2 x 22.
    assert_eq!((ln.clients, ld.clients), (Some(16 * 24), Some(2 * 22)));
    // Its points run at seeds 1-5 (a median row).
    let e = p.experiments.iter().find(|e| e.id == "smart-clients-a");
    for s in e.unwrap().series.iter().filter(|s| s.label != "ART on DM") {
        assert_eq!(s.seeds.len(), SEEDS as usize, "{}", s.label);
    }
}
