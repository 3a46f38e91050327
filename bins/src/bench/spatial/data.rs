//! The objects of a spatial run and its search windows: generated (`uniform` rectangles or
//! `skewed` points) or read from a CSV file, and the paper's power-law window sizes.
use super::{CLUSTERS, SPACE, SpatialData};
use crate::bench::BenchArgs;
use crate::bench::ycsb::Rng;
use remora::core::catfish::Rect;

/// The objects: generated, or read from a file.
pub(super) struct Data {
    kind: SpatialData,
    file: Vec<Rect>,
    seed: u64,
}

impl Data {
    pub(super) fn new(a: &BenchArgs) -> Result<Data, String> {
        let file = match &a.spatial.data {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| format!("--data {}: {e}", p.display()))?;
                parse_csv(&text).map_err(|e| format!("--data {}: {e}", p.display()))?
            }
            None => Vec::new(),
        };
        Ok(Data {
            kind: a.spatial.spatial_data,
            file,
            seed: a.sim.seed,
        })
    }

    pub(super) fn name(&self) -> String {
        if self.file.is_empty() {
            format!("{:?}", self.kind).to_lowercase()
        } else {
            format!("file ({} objects)", self.file.len())
        }
    }

    /// Object `i` (a file's objects repeat when `i` passes its end).
    pub(super) fn object(&self, i: u64) -> Rect {
        if !self.file.is_empty() {
            return self.file[(i % self.file.len() as u64) as usize];
        }
        let mut r = Rng::new(self.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xda7a);
        let c = |v: i64| v.clamp(0, SPACE) as i32;
        match self.kind {
            SpatialData::Uniform => {
                let x = r.below(SPACE as u64) as i64;
                let y = r.below(SPACE as u64) as i64;
                let w = r.below((SPACE / 1000) as u64) as i64;
                let h = r.below((SPACE / 1000) as u64) as i64;
                rect(c(x), c(y), c(x + w), c(y + h))
            }
            SpatialData::Skewed => {
                let k = r.below(CLUSTERS);
                let mut cr = Rng::new(self.seed ^ 0xc1u64 ^ (k << 32));
                let cx = cr.below(SPACE as u64) as f64;
                let cy = cr.below(SPACE as u64) as f64;
                // Sum of four uniforms: mean 2, σ ≈ 0.577.
                let mut g = || (0..4).map(|_| r.unit()).sum::<f64>() - 2.0;
                let sigma = SPACE as f64 / 100.0 / 0.577;
                let x = (cx + g() * sigma) as i64;
                let y = (cy + g() * sigma) as i64;
                rect(c(x), c(y), c(x), c(y))
            }
        }
    }

    /// A search window of `frac` of the space's area centred on a random object below
    /// `existing`.
    pub(super) fn window(&self, r: &mut Rng, existing: u64, frac: f64) -> Rect {
        let o = self.object(r.below(existing.max(1)));
        let cx = (o.min_x as i64 + o.max_x as i64) / 2;
        let cy = (o.min_y as i64 + o.max_y as i64) / 2;
        let half = ((frac.sqrt() * SPACE as f64) / 2.0).max(0.5) as i64;
        let c = |v: i64| v.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
        rect(c(cx - half), c(cy - half), c(cx + half), c(cy + half))
    }
}

/// The paper's power-law request scale (seeds/003 §5.2): `f(t) ∝ t^-0.99` on
/// `(0.00001, 0.01]`, drawn by inverting its distribution function at `u` in `[0, 1)`.
pub(super) fn power_law_window(u: f64) -> f64 {
    const LO: f64 = 0.00001;
    const HI: f64 = 0.01;
    // F(t) = (t^e - LO^e) / (HI^e - LO^e) with e = 1 - 0.99.
    const E: f64 = 1.0 - 0.99;
    let (a, b) = (LO.powf(E), HI.powf(E));
    (a + u.clamp(0.0, 1.0) * (b - a))
        .powf(1.0 / E)
        .clamp(LO, HI)
}

/// A rectangle from two corners in any order.
fn rect(x0: i32, y0: i32, x1: i32, y1: i32) -> Rect {
    Rect {
        min_x: x0.min(x1),
        min_y: y0.min(y1),
        max_x: x0.max(x1),
        max_y: y0.max(y1),
    }
}

/// CSV lines of 4 (rectangle) or 2 (point) numbers, scaled linearly into `[0, SPACE]`.
fn parse_csv(text: &str) -> Result<Vec<Rect>, String> {
    let mut raw = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let v: Vec<f64> = line
            .split(',')
            .map(|f| f.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("line {}: {e}", n + 1))?;
        let r = match v[..] {
            [x, y] => [x, y, x, y],
            [a, b, c, d] => [a, b, c, d],
            _ => {
                return Err(format!(
                    "line {}: {} fields; want x,y or min_x,min_y,max_x,max_y",
                    n + 1,
                    v.len()
                ));
            }
        };
        if r.iter().any(|f| !f.is_finite()) || r[0] > r[2] || r[1] > r[3] {
            return Err(format!(
                "line {}: not a rectangle (non-finite, or a minimum above its maximum)",
                n + 1
            ));
        }
        raw.push(r);
    }
    if raw.is_empty() {
        return Err("no objects".into());
    }
    let lo_x = raw.iter().map(|r| r[0]).fold(f64::INFINITY, f64::min);
    let lo_y = raw.iter().map(|r| r[1]).fold(f64::INFINITY, f64::min);
    let hi_x = raw.iter().map(|r| r[2]).fold(f64::NEG_INFINITY, f64::max);
    let hi_y = raw.iter().map(|r| r[3]).fold(f64::NEG_INFINITY, f64::max);
    let scale = |v: f64, lo: f64, hi: f64| {
        if hi > lo {
            ((v - lo) / (hi - lo) * SPACE as f64).round() as i32
        } else {
            0
        }
    };
    Ok(raw
        .iter()
        .map(|r| Rect {
            min_x: scale(r[0], lo_x, hi_x),
            min_y: scale(r[1], lo_y, hi_y),
            max_x: scale(r[2], lo_x, hi_x),
            max_y: scale(r[3], lo_y, hi_y),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_takes_points_and_rectangles_and_scales_them() {
        let r = parse_csv("# c\n0,0\n10,20,30,40\n\n").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0], Rect::new(0, 0, 0, 0).unwrap());
        assert_eq!(r[1].max_x as i64, SPACE);
        assert_eq!(r[1].max_y as i64, SPACE);
        assert_eq!(r[1].min_x as i64, SPACE / 3);
    }

    /// The power law spans the paper's range, and about each decade of it is equally likely
    /// (t^-0.99 is nearly 1/t): a third of the windows below 0.0001, a third above 0.001.
    #[test]
    fn power_law_windows_follow_the_papers_distribution() {
        assert!((power_law_window(0.0) - 0.00001).abs() < 1e-12);
        assert!((power_law_window(1.0) - 0.01).abs() < 1e-9);
        let n = 10_000;
        let ts: Vec<f64> = (0..n)
            .map(|i| power_law_window(i as f64 / n as f64))
            .collect();
        assert!(ts.windows(2).all(|w| w[0] <= w[1]), "monotone in u");
        let share = |lim: f64| ts.iter().filter(|t| **t < lim).count() as f64 / n as f64;
        assert!((0.30..0.36).contains(&share(0.0001)), "{}", share(0.0001));
        assert!((0.63..0.69).contains(&share(0.001)), "{}", share(0.001));
    }

    #[test]
    fn csv_rejects_bad_lines() {
        assert!(parse_csv("1,2,3").unwrap_err().contains("line 1"));
        assert!(parse_csv("0,0\n5,5,1,1").unwrap_err().contains("line 2"));
        assert!(parse_csv("a,b").is_err());
        assert!(parse_csv("# only a comment").is_err());
    }
}
