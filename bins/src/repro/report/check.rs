//! `--check`: a run's report against the committed one. Fails on rows added or gone, a ratio
//! moved to the other side of 1, or a row whose class got worse (faithful to rough or off,
//! rough to off). Wall-clock rows (real threads: their figures depend on the machine's
//! load) are compared for presence only.
use super::class::{self, Class};
use super::{Report, Row};
use std::collections::BTreeSet;
use std::path::Path;

/// The differences between the committed report at `path` and `now` (empty: same shape).
pub fn check(path: &Path, now: &Report) -> Result<Vec<String>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--check {}: {e}", path.display()))?;
    let old: Report = serde_json::from_str(&text)
        .map_err(|e| format!("--check {}: not a repro report.json: {e}", path.display()))?;
    Ok(diff(&old, now))
}

fn ratio(v: Option<f64>) -> String {
    v.map_or("none".into(), |v| format!("{v:.2}x"))
}

/// What `row`'s class is measured from: remora's ratio against the paper's figure.
fn graded(r: &Row, c: Class) -> String {
    format!(
        "{} ({}{} against the paper's {}, remora / paper {})",
        c.name(),
        ratio(r.remora),
        r.seeds
            .as_ref()
            .map_or(String::new(), |s| format!(", the {}", s.text())),
        r.paper_text(),
        r.of_paper
            .or_else(|| class::of_paper(r.remora, r.paper_lo, r.paper_hi))
            .map_or("—".into(), |v| format!("{v:.2}"))
    )
}

pub fn diff(old: &Report, now: &Report) -> Vec<String> {
    let key = |r: &Row| format!("{}/{}", r.paper, r.id);
    let mut d = Vec::new();
    if old.scale != now.scale {
        d.push(format!(
            "scale {} committed, {} now (compare like with like)",
            old.scale, now.scale
        ));
    }
    let ok: BTreeSet<String> = old.rows().map(key).collect();
    let nk: BTreeSet<String> = now.rows().map(key).collect();
    for k in ok.difference(&nk) {
        d.push(format!("row {k} is gone"));
    }
    for k in nk.difference(&ok) {
        d.push(format!("row {k} is new: regenerate the committed report"));
    }
    for o in old.rows() {
        let Some(n) = now.rows().find(|n| key(n) == key(o)) else {
            continue;
        };
        if o.wall_clock || n.wall_clock {
            continue;
        }
        if o.side != n.side {
            d.push(format!(
                "{}: ratio {} 1 committed ({}), {} now ({})",
                key(o),
                o.side,
                ratio(o.remora),
                n.side,
                ratio(n.remora)
            ));
        }
        // The class from the ratio and the paper's range (a report from before classes has
        // none stored: the same function grades it).
        let (oc, nc) = (class::of_row(o), class::of_row(n));
        if let (Some(a), Some(b)) = (oc.rank(), nc.rank())
            && b > a
        {
            d.push(format!(
                "{}: class got worse: {} committed, {} now",
                key(o),
                graded(o, oc),
                graded(n, nc)
            ));
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::super::evaluate;
    use super::super::evaluate::side;
    use super::super::tests::{claim, exps, paper, report};
    use super::*;
    use crate::repro::{Metric, Pick};

    fn row() -> Row {
        evaluate(
            &paper(vec![]),
            &claim(
                "x",
                Metric::Mops,
                false,
                Some((Pick::new("e", "a", "C"), Pick::new("e", "b", "C"))),
            ),
            &exps(),
        )
    }

    #[test]
    fn check_compares_rows_and_sides() {
        let p = paper(vec![]);
        let up = row();
        let mut down = up.clone();
        down.remora = Some(0.5);
        down.side = side(Some(0.5), false);
        let other = evaluate(&p, &claim("y", Metric::Mops, false, None), &exps());
        let a = report(vec![up.clone(), other.clone()]);
        assert!(diff(&a, &a).is_empty());
        // Same side, same class, other value: same shape.
        let mut up2 = up.clone();
        up2.remora = Some(2.4);
        assert!(diff(&a, &report(vec![up2, other.clone()])).is_empty());
        // A tie is "near" 1, not above or below it.
        assert_eq!(side(Some(1.01), false), "near");
        assert_eq!(side(Some(1.2), true), "near");
        assert_eq!(side(Some(1.2), false), "above");
        // Flipped side (and off the paper's 2-3x by more than 3x): both reported.
        let d = diff(&a, &report(vec![down.clone(), other.clone()]));
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].contains("t/x") && d[0].contains("below"), "{d:?}");
        // A wall-clock row (soft fabric, sockets) may change sides and classes; it may not
        // go.
        let mut soft_up = up.clone();
        soft_up.wall_clock = true;
        let mut soft_down = down.clone();
        soft_down.wall_clock = true;
        let s = report(vec![soft_up, other.clone()]);
        assert!(diff(&s, &report(vec![soft_down, other.clone()])).is_empty());
        assert!(!diff(&s, &report(vec![other.clone()])).is_empty());
        let d = diff(&a, &report(vec![up.clone()]));
        assert!(d.iter().any(|s| s.contains("t/y is gone")), "{d:?}");
        let mut extra = other.clone();
        extra.id = "z".into();
        let d = diff(&a, &report(vec![up.clone(), other, extra]));
        assert!(d.iter().any(|s| s.contains("t/z is new")), "{d:?}");
    }

    /// A row that stays on the paper's side of 1 but slides from faithful to rough, or from
    /// rough to off, fails the check with both figures named; a better class passes.
    #[test]
    fn check_fails_on_a_class_regression() {
        // The paper says 2-3x; remora measured 2.00x: faithful.
        let faithful = row();
        assert_eq!(faithful.class, "faithful");
        assert_eq!(faithful.remora, Some(2.0));
        let at = |r: f64| {
            let mut x = faithful.clone();
            x.remora = Some(r);
            x.of_paper = class::of_paper(Some(r), x.paper_lo, x.paper_hi);
            x.class = class::classify(Some(r), x.paper_lo, x.paper_hi)
                .name()
                .into();
            x
        };
        let rough = at(1.1);
        assert_eq!(
            (rough.class.as_str(), rough.side.as_str()),
            ("rough", "above")
        );
        let committed = report(vec![faithful.clone()]);
        let d = diff(&committed, &report(vec![rough.clone()]));
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].contains(
                "t/x: class got worse: faithful (2.00x against the paper's \
                           2.00-3.00x, remora / paper 1.00) committed, rough (1.10x"
            ),
            "{d:?}"
        );
        // Rough to off, both above 1: against a paper's 7.44-11.15x, 3.0x is rough (0.40)
        // and 2.0x off (0.27).
        let wide = |r: f64| {
            let mut x = at(r);
            (x.paper_lo, x.paper_hi) = (7.44, 11.15);
            x.of_paper = class::of_paper(Some(r), x.paper_lo, x.paper_hi);
            x
        };
        let (r2, o2) = (wide(3.0), wide(2.0));
        assert_eq!(
            (class::of_row(&r2), class::of_row(&o2)),
            (Class::Rough, Class::Off)
        );
        let d = diff(&report(vec![r2.clone()]), &report(vec![o2]));
        assert!(
            d.len() == 1 && d[0].contains("rough (3.00x") && d[0].contains("off (2.00x"),
            "{d:?}"
        );
        // Better is fine; so is the same class.
        assert!(diff(&report(vec![rough.clone()]), &committed).is_empty());
        assert!(diff(&report(vec![wide(2.0)]), &report(vec![r2])).is_empty());
        // A committed report from before classes (no class field) is graded the same way.
        let mut old = faithful.clone();
        old.class = String::new();
        let d = diff(&report(vec![old]), &report(vec![at(1.1)]));
        assert!(d.iter().any(|s| s.contains("class got worse")), "{d:?}");
        // report.json round-trips, and --check reads it.
        let dir = std::env::temp_dir().join(format!("remora-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        committed.write(&dir).unwrap();
        assert!(
            check(&dir.join("report.json"), &committed)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            check(&dir.join("report.json"), &report(vec![at(1.1)]))
                .unwrap()
                .len(),
            1
        );
        std::fs::write(dir.join("bad.json"), "{").unwrap();
        assert!(check(&dir.join("bad.json"), &committed).is_err());
    }
}
