//! The Erda repro's setup checks: paced writers, the server-CPU rows' one paced client and
//! the thread sweeps' bound.
use super::*;
use crate::repro::ScaleSel;

/// Every update-only throughput or latency row is measured with writers paced as the
/// paper's released clients pace them (`PACED`): closed-loop writers make those rows a
/// measure of the request thread instead (Erda / Redo 1.36x where the paper's are
/// approximately equal). Read-only (YCSB-C) rows are left closed-loop.
#[test]
fn update_only_rows_pace_their_writers() {
    for scale in [ScaleSel::Quick, ScaleSel::Full] {
        let p = paper(&Scale::of(scale).for_paper("erda"));
        let args = |pick: &Pick| -> String {
            let e = p.experiments.iter().find(|e| e.id == pick.exp);
            let e = e.unwrap_or_else(|| panic!("no experiment {}", pick.exp));
            let s = e.series.iter().find(|s| s.label == pick.series);
            let s = s.unwrap_or_else(|| panic!("no series {} in {}", pick.series, pick.exp));
            s.args.clone()
        };
        let mut paced = 0;
        for c in &p.claims {
            let Some((num, den)) = &c.points else {
                continue;
            };
            if !matches!(c.metric, Metric::Mops | Metric::Mean) {
                continue;
            }
            for pick in [num, den] {
                let a = args(pick);
                if pick.workload == "UPD" {
                    assert!(a.contains(PACED), "{}: {a}", c.id);
                    paced += 1;
                }
                if pick.workload == "c" {
                    assert!(!a.contains("--think-read-us"), "{}: {a}", c.id);
                }
            }
        }
        assert!(paced >= 8, "{paced} paced picks");
    }
}

/// No curve runs more client threads than the authors' throughput clients start (16):
/// past them, "at the most client threads" measured a point the paper never ran.
#[test]
fn thread_sweeps_stop_at_the_papers_16() {
    for scale in [ScaleSel::Quick, ScaleSel::Full] {
        let p = paper(&Scale::of(scale).for_paper("erda"));
        let mut curves = 0;
        for e in p.experiments.iter().filter(|e| e.chart == Chart::Curve) {
            for s in &e.series {
                let b = crate::repro::run::parse_bench(&s.args).expect("a bench line");
                let sweep = b.sweep.as_deref().expect("a curve sweeps");
                let most = sweep
                    .trim_start_matches("clients=")
                    .split(',')
                    .map(|t| t.parse::<usize>().expect("a client count"))
                    .max();
                assert_eq!(most, Some(16), "{}: {}", e.id, s.args);
                curves += 1;
            }
        }
        assert!(curves >= 6, "{curves} curves");
    }
}

/// Every server-CPU row is measured where the paper measured it, on lightly loaded
/// servers (clients paced as its released ones, `erda-cpu`): closed loop, a baseline's
/// server is 100 % busy and never pays the wakes of the authors' blocking servers while
/// Erda's, serving writes only, does (YCSB-B Redo / Erda 3.09x where the paper has 20.09x).
#[test]
fn cpu_rows_are_measured_with_paced_clients() {
    for scale in [ScaleSel::Quick, ScaleSel::Full] {
        let p = paper(&Scale::of(scale).for_paper("erda"));
        let e = p.experiments.iter().find(|e| e.id == "erda-cpu");
        let e = e.expect("an erda-cpu experiment");
        let mut rows = 0;
        for c in p.claims.iter().filter(|c| c.metric == Metric::ServerCpu) {
            let Some((num, den)) = &c.points else {
                panic!("{}: no points", c.id);
            };
            for pick in [num, den] {
                assert_eq!(pick.exp, "erda-cpu", "{}", c.id);
                let s = e.series.iter().find(|s| s.label == pick.series);
                let a = &s
                    .unwrap_or_else(|| panic!("no series {}", pick.series))
                    .args;
                let pace = if a.contains("--index erda ") || a.ends_with("--index erda") {
                    CPU_PACE_ERDA
                } else {
                    CPU_PACE_BASELINE
                };
                assert!(a.contains(pace), "{}: {a}", c.id);
                // One client thread, as the paper's value-size clients.
                let b = crate::repro::run::parse_bench(a).expect("a bench line");
                assert_eq!(
                    (b.sim.compute_nodes, b.sim.clients_per_node),
                    (1, 1),
                    "{}: {a}",
                    c.id
                );
            }
            rows += 1;
        }
        assert_eq!(rows, 6, "server-CPU rows");
    }
}

/// The two YCSB-B server-CPU rows (the paper's only rows whose ratio moves over 15% with
/// the seed) are medians over seeds 1-5: their four YCSB-B runs, and no other run of the
/// paper, go over seeds.
#[test]
fn only_the_ycsb_b_cpu_runs_go_over_seeds() {
    let p = paper(&Scale::of(ScaleSel::Quick).for_paper("erda"));
    let mut seeded = Vec::new();
    for e in &p.experiments {
        for s in e.series.iter().filter(|s| !s.seeds.is_empty()) {
            assert_eq!(s.seeds, vec![1, 2, 3, 4, 5], "{}", s.label);
            seeded.push((e.id.as_str(), s.label.as_str(), s.workloads.clone()));
        }
    }
    let b = |l| ("erda-cpu", l, vec!["b"]);
    assert_eq!(
        seeded,
        vec![
            b("Erda 64 B"),
            b("Redo Logging 64 B"),
            b("Erda 1024 B"),
            b("Read-After-Write 1024 B")
        ]
    );
    // Both points of each b-cpu row are among them.
    for id in ["b-cpu-redo", "b-cpu-raw-values"] {
        let c = p.claims.iter().find(|c| c.id == id).unwrap();
        let (num, den) = c.points.as_ref().unwrap();
        for pick in [num, den] {
            assert!(
                seeded
                    .iter()
                    .any(|(e, l, w)| *e == pick.exp && *l == pick.series && w[0] == pick.workload),
                "{id}: {pick:?}"
            );
        }
    }
}
