//! Grading a "same throughput with N times less of a resource" claim ([`Claim::equal_at`]):
//! the numerator's series is measured at several divisors of the resource (CHIME's cache at
//! 1/8.7, 1/15, 1/30 of Sherman's); the row's figure is the divisor at which its throughput
//! falls to the denominator's with all of it.
//!
//! Between two measured divisors the throughput is taken as linear in the logarithm of the
//! divisor (a cache's hit rate grows about with the log of its size under a skewed key
//! popularity), so the divisor found is `d_lo * (d_hi / d_lo)^f`, `f` the fraction of the
//! throughput drop from `d_lo` to `d_hi` the target lies at. Only a crossing between two
//! measured divisors gives a figure: no extrapolation. Where every divisor measured is
//! still above the target (or all below), the row has no figure and says which bound holds.

use super::super::Claim;
use super::evaluate::picked;
use super::{ExpReport, Point, Row, class, evaluate};

/// The divisor at which throughput `(divisor, mops)` pairs cross `target`, interpolated in
/// log(divisor) between the bracketing pair; `Err` names the bound when nothing brackets it.
pub(crate) fn crossing(mut pts: Vec<(f64, f64)>, target: f64) -> Result<(f64, f64, f64), String> {
    pts.retain(|(d, m)| *d > 0.0 && d.is_finite() && m.is_finite());
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    for w in pts.windows(2) {
        let ((d0, m0), (d1, m1)) = (w[0], w[1]);
        if m0 >= target && m1 <= target && m0 > m1 {
            let f = (m0 - target) / (m0 - m1);
            return Ok(((d0.ln() + f * (d1 / d0).ln()).exp(), d0, d1));
        }
        if m0 >= target && m1 <= target {
            // Flat at the target across the pair: the smallest divisor already gives it.
            return Ok((d0, d0, d1));
        }
    }
    match (pts.first(), pts.last()) {
        (Some(_), Some(&(dl, ml))) if ml > target => Err(format!(
            "still above the target at the largest divisor measured, {dl}x ({ml:.3} Mops): \
             the divisor is more than {dl}x"
        )),
        (Some(&(df, mf)), Some(_)) if mf < target => Err(format!(
            "already below the target at the smallest divisor measured, {df}x ({mf:.3} Mops): \
             the divisor is less than {df}x"
        )),
        _ => Err("no divisor measured".into()),
    }
}

/// The point of the lowest seed among `pts`.
fn first_seed(pts: Vec<&Point>) -> Option<&Point> {
    pts.into_iter().min_by_key(|p| p.seed)
}

/// The row of an `equal_at` claim: `row` as `evaluate` starts it.
pub(super) fn evaluate_equal(mut row: Row, c: &Claim, exps: &[ExpReport]) -> Row {
    let Some((_, den)) = &c.points else {
        return row;
    };
    let Some(d) = first_seed(picked(exps, den)) else {
        row.missing = format!("no measured point: {} in {}", den.series, den.exp);
        return row;
    };
    let pts: Vec<(f64, f64, &Point)> = c
        .equal_at
        .iter()
        .filter_map(|(div, k)| {
            first_seed(picked(exps, k))
                .filter(|p| p.seed == d.seed)
                .map(|p| (*div, p.mops, p))
        })
        .collect();
    let sweep = pts
        .iter()
        .map(|(div, m, _)| format!("1/{div}: {m:.3} Mops"))
        .collect::<Vec<_>>()
        .join(", ");
    let target = d.mops;
    row.seed = Some(d.seed);
    row.wall_clock = d.fabric != "sim" || pts.iter().any(|(_, _, p)| p.fabric != "sim");
    match crossing(pts.iter().map(|(div, m, _)| (*div, *m)).collect(), target) {
        Ok((r, lo, hi)) => {
            row.remora = Some(r);
            let near_one = class::kind(c.paper.0, c.paper.1) == class::Kind::Close;
            row.side = evaluate::side(Some(r), near_one);
            row.agrees = Some(evaluate::same_side(
                r,
                (c.paper.0 + c.paper.1) / 2.0,
                near_one,
            ));
            row.of_paper = class::of_paper(Some(r), c.paper.0, c.paper.1);
            row.class =
                class::with_side(class::classify(Some(r), c.paper.0, c.paper.1), row.agrees)
                    .name()
                    .into();
            row.measured = format!(
                "{} clients, {}: {} {:.3} Mops with all of it; the numerator's sweep {sweep}: \
                 its throughput meets that at {r:.1}x less (interpolated in log(divisor) \
                 between 1/{lo} and 1/{hi})",
                d.clients,
                evaluate::wname(&d.workload),
                den.series,
                target,
            );
        }
        Err(why) => {
            row.measured = format!(
                "{} {:.3} Mops with all of it; the numerator's sweep {sweep}",
                den.series, target
            );
            row.missing = why;
        }
    }
    row
}

#[cfg(test)]
mod tests {
    use super::crossing;

    #[test]
    fn the_crossing_is_interpolated_in_log_divisor() {
        // 15x at 11.372, 30x at 10.086, target 11.004: 28.6% of the way, 15 * 2^0.286.
        let (d, lo, hi) =
            crossing(vec![(30.0, 10.086), (8.7, 13.68), (15.0, 11.372)], 11.004).unwrap();
        assert_eq!((lo, hi), (15.0, 30.0));
        let f: f64 = (11.372 - 11.004) / (11.372 - 10.086);
        assert!((d - 15.0 * 2f64.powf(f)).abs() < 1e-9, "{d}");
        assert!(d > 18.0 && d < 18.5, "{d}");
    }

    #[test]
    fn no_crossing_gives_no_figure_but_the_bound() {
        let e = crossing(vec![(8.7, 13.0), (15.0, 12.0)], 11.0).unwrap_err();
        assert!(e.contains("more than 15x"), "{e}");
        let e = crossing(vec![(8.7, 10.0), (15.0, 9.0)], 11.0).unwrap_err();
        assert!(e.contains("less than 8.7x"), "{e}");
        assert!(crossing(vec![], 1.0).is_err());
    }
}
