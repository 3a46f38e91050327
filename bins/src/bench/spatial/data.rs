//! The objects of a spatial run and its search windows: generated (`uniform` rectangles or
//! `skewed` points) or read from a CSV file, and the paper's request scales.
//!
//! The Catfish paper's setup (seeds/003 §5.2), in the unit square (`SPACE` units a side):
//! - the tree's rectangles have edges drawn uniformly from (0, 0.0001] per axis
//!   ([`DATA_EDGE`]); the paper does not say where they lie, so they are placed uniformly.
//! - a search at request scale `s` is a rectangle whose edges are drawn uniformly from
//!   (0, s] per axis ("the request scale of 0.00001 means the edges of a requested
//!   rectangle are randomly selected from (0,0.00001]"); the paper does not say where a
//!   window lies, so it is placed uniformly over the space.
//! - the power-law request scale: our reading is that each search first draws its scale
//!   `t` with density ∝ t^-0.99 on (0.00001, 0.01] (the paper calls `t` the "request
//!   scale", the same word it defines for 0.00001 and 0.01), then its edges from (0, t].
//! - inserts (the 90/10 workloads): "the rectangle scales of both search and insert
//!   requests are the same as those in the previous experiments", so an inserted
//!   rectangle's edges are drawn like a search's; its corner is placed by the paper's rule:
//!   x and y each drawn with density ∝ t^-0.99 on (0.5, 1.0], then reflected to one of
//!   (x, y), (1-x, y), (x, 1-y), (1-x, 1-y) at random.
//!
//! Coordinates are integers: an edge of `e` of the side spans `floor(e * SPACE)` units
//! (0 when `e` is under one unit), so it never exceeds the drawn edge.
use super::{CLUSTERS, SPACE, SpatialData};
use crate::bench::BenchArgs;
use crate::bench::ycsb::Rng;
use remora::core::catfish::Rect;

/// The objects: generated, or read from a file.
pub(super) struct Data {
    kind: SpatialData,
    file: Vec<Rect>,
    seed: u64,
    /// Objects loaded before the run; generated objects past them are inserts.
    records: u64,
    scale: Scale,
    /// Factor on every generated length (data edges, request scales): sqrt(paper objects /
    /// records) when fewer objects are loaded than the paper's tree holds, else 1.
    zoom: f64,
}

/// Edge bound of the paper's tree rectangles, as a fraction of the side (seeds/003 §5.2).
pub(super) const DATA_EDGE: f64 = 0.0001;

/// The request scale of searches (and of generated inserts).
#[derive(Debug, Clone, Copy)]
pub(super) enum Scale {
    /// Edges uniform in (0, s] of the side.
    Fixed(f64),
    /// Each request draws its scale from the paper's power law, then edges in (0, t].
    PowerLaw,
}

impl Scale {
    /// One request's edge bound.
    fn draw(self, r: &mut Rng) -> f64 {
        match self {
            Scale::Fixed(s) => s,
            Scale::PowerLaw => power_law_window(r.unit()),
        }
    }
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
        let scale = if a.spatial.power_law_windows {
            Scale::PowerLaw
        } else {
            Scale::Fixed(a.spatial.window)
        };
        let zoom = if file.is_empty() && a.spatial.paper_objects > a.records && a.records > 0 {
            (a.spatial.paper_objects as f64 / a.records as f64).sqrt()
        } else {
            1.0
        };
        Ok(Data {
            kind: a.spatial.spatial_data,
            file,
            seed: a.sim.seed,
            records: a.records,
            scale,
            zoom,
        })
    }

    /// What `--paper-objects` did to the run's lengths, for its notes ("" when nothing).
    pub(super) fn zoom_note(&self) -> String {
        if self.zoom == 1.0 {
            return String::new();
        }
        format!(
            "; lengths x{:.2} (data edges and request scales: {} objects lie as densely as \
             the paper's --paper-objects)",
            self.zoom, self.records
        )
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
            SpatialData::Uniform if i >= self.records => {
                let e = self.scale.draw(&mut r) * self.zoom;
                let (w, h) = (edge(&mut r, e), edge(&mut r, e));
                let mut at = |side: i64| {
                    let v = power_law(r.unit(), 0.5, 1.0);
                    let v = if r.below(2) == 0 { v } else { 1.0 - v };
                    ((v * SPACE as f64) as i64).min(SPACE - side)
                };
                let (x, y) = (at(w), at(h));
                rect(c(x), c(y), c(x + w), c(y + h))
            }
            SpatialData::Uniform => {
                let d = DATA_EDGE * self.zoom;
                let (w, h) = (edge(&mut r, d), edge(&mut r, d));
                let x = r.below((SPACE - w + 1) as u64) as i64;
                let y = r.below((SPACE - h + 1) as u64) as i64;
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

    /// A search window at the run's request scale: edges uniform in (0, t] of the side per
    /// axis (`t` the scale, or drawn from the power law), placed uniformly in the space.
    pub(super) fn window(&self, r: &mut Rng) -> Rect {
        let t = self.scale.draw(r) * self.zoom;
        let (w, h) = (edge(r, t), edge(r, t));
        let x = r.below((SPACE - w + 1) as u64) as i32;
        let y = r.below((SPACE - h + 1) as u64) as i32;
        rect(x, y, x + w as i32, y + h as i32)
    }
}

/// An edge drawn uniformly from (0, `bound`] of the side, in whole units (rounded down).
fn edge(r: &mut Rng, bound: f64) -> i64 {
    let e = (1.0 - r.unit()) * bound.clamp(0.0, 1.0);
    ((e * SPACE as f64) as i64).clamp(0, SPACE)
}

/// `f(t) ∝ t^-0.99` on `(lo, hi]` (seeds/003 §5.2), drawn by inverting its distribution
/// function at `u` in `[0, 1)`.
fn power_law(u: f64, lo: f64, hi: f64) -> f64 {
    // F(t) = (t^e - lo^e) / (hi^e - lo^e) with e = 1 - 0.99.
    const E: f64 = 1.0 - 0.99;
    let (a, b) = (lo.powf(E), hi.powf(E));
    (a + u.clamp(0.0, 1.0) * (b - a))
        .powf(1.0 / E)
        .clamp(lo, hi)
}

/// The paper's power-law request scale (seeds/003 §5.2): `f(t) ∝ t^-0.99` on
/// `(0.00001, 0.01]`, drawn by inverting its distribution function at `u` in `[0, 1)`.
pub(super) fn power_law_window(u: f64) -> f64 {
    power_law(u, 0.00001, 0.01)
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

    fn generated(records: u64, scale: Scale) -> Data {
        Data {
            kind: SpatialData::Uniform,
            file: Vec::new(),
            seed: 7,
            records,
            scale,
            zoom: 1.0,
        }
    }

    /// `--paper-objects`: 10k objects zoomed to the paper's 2M density meet about as many
    /// objects per 0.01 search as the paper's tree (2M x (0.005 + 0.00005)^2 ≈ 51 on
    /// average), where the unzoomed 10k meet almost none.
    #[test]
    fn zoomed_runs_meet_as_many_objects_per_search_as_the_papers_tree() {
        let hits = |zoom: f64| {
            let mut d = generated(10_000, Scale::Fixed(0.01));
            d.zoom = zoom;
            let objs: Vec<Rect> = (0..10_000).map(|i| d.object(i)).collect();
            let mut r = Rng::new(3);
            let n = 300;
            let mut hits = 0usize;
            for _ in 0..n {
                let q = d.window(&mut r);
                hits += objs
                    .iter()
                    .filter(|o| {
                        o.min_x <= q.max_x
                            && q.min_x <= o.max_x
                            && o.min_y <= q.max_y
                            && q.min_y <= o.max_y
                    })
                    .count();
            }
            hits as f64 / n as f64
        };
        let zoomed = hits((2_000_000f64 / 10_000.0).sqrt());
        assert!(
            (35.0..70.0).contains(&zoomed),
            "zoomed: {zoomed} hits/search"
        );
        let plain = hits(1.0);
        assert!(plain < 1.0, "unzoomed: {plain} hits/search");
    }

    fn edges(q: &Rect) -> (f64, f64) {
        let side = SPACE as f64;
        (
            (q.max_x - q.min_x) as f64 / side,
            (q.max_y - q.min_y) as f64 / side,
        )
    }

    /// The paper's request scale bounds each window edge (not the window's area): at 0.01
    /// every edge is within (0, 0.01] and they average about half of it, and windows are
    /// spread over the whole space, not around the data.
    #[test]
    fn window_edges_are_within_the_request_scale() {
        for s in [0.00001, 0.01] {
            let d = generated(1000, Scale::Fixed(s));
            let mut r = Rng::new(3);
            let qs: Vec<Rect> = (0..4000).map(|_| d.window(&mut r)).collect();
            let es: Vec<f64> = qs.iter().flat_map(|q| <[f64; 2]>::from(edges(q))).collect();
            assert!(es.iter().all(|e| *e <= s), "scale {s}: an edge above it");
            let mean = es.iter().sum::<f64>() / es.len() as f64;
            assert!(
                (0.40 * s..0.55 * s).contains(&mean),
                "scale {s}: mean edge {mean}"
            );
            assert!(qs.iter().all(|q| q.min_x >= 0 && q.max_x as i64 <= SPACE));
            let right = qs.iter().filter(|q| q.min_x as i64 > SPACE / 2).count();
            assert!(
                (1800..2200).contains(&right),
                "{right} of 4000 right of centre"
            );
        }
        // The power law: each edge within its own drawn scale, so within (0, 0.01], and most
        // searches small.
        let d = generated(1000, Scale::PowerLaw);
        let mut r = Rng::new(4);
        let es: Vec<f64> = (0..4000)
            .flat_map(|_| <[f64; 2]>::from(edges(&d.window(&mut r))))
            .collect();
        assert!(es.iter().all(|e| *e <= 0.01));
        let small = es.iter().filter(|e| **e < 0.0001).count();
        assert!(
            small > es.len() / 3,
            "{small} of {} edges under 0.0001",
            es.len()
        );
    }

    /// The tree's rectangles have edges in (0, 0.0001] and lie uniformly; inserts (ids past
    /// the loaded records) lean to the centre, by the paper's power law on (0.5, 1.0]
    /// (density at 0.5 about twice that at 1.0).
    #[test]
    fn data_and_inserts_follow_the_papers_setup() {
        let d = generated(2000, Scale::Fixed(0.00001));
        let loaded: Vec<Rect> = (0..2000).map(|i| d.object(i)).collect();
        let es: Vec<f64> = loaded
            .iter()
            .flat_map(|q| <[f64; 2]>::from(edges(q)))
            .collect();
        assert!(es.iter().all(|e| *e <= DATA_EDGE));
        let mean = es.iter().sum::<f64>() / es.len() as f64;
        assert!(
            (0.40 * DATA_EDGE..0.55 * DATA_EDGE).contains(&mean),
            "{mean}"
        );
        let central = |q: &Rect| {
            let d = |v: i32| (v as f64 / SPACE as f64 - 0.5).abs();
            d(q.min_x).max(d(q.min_y)) < 0.25
        };
        let loaded_central = loaded.iter().filter(|q| central(q)).count();
        let inserted: Vec<Rect> = (2000..4000).map(|i| d.object(i)).collect();
        let inserted_central = inserted.iter().filter(|q| central(q)).count();
        // Uniform: a quarter of the objects have both coordinates within 0.25 of the centre;
        // the power law puts ln(1.5)/ln(2) = 58% of each coordinate there (34% of objects).
        assert!((420..580).contains(&loaded_central), "{loaded_central}");
        assert!((600..770).contains(&inserted_central), "{inserted_central}");
        let ies: Vec<f64> = inserted
            .iter()
            .flat_map(|q| <[f64; 2]>::from(edges(q)))
            .collect();
        assert!(
            ies.iter().all(|e| *e <= 0.00001),
            "inserts at the request scale"
        );
        assert_eq!(
            d.object(2500),
            generated(2000, Scale::Fixed(0.00001)).object(2500)
        );
    }

    #[test]
    fn csv_rejects_bad_lines() {
        assert!(parse_csv("1,2,3").unwrap_err().contains("line 1"));
        assert!(parse_csv("0,0\n5,5,1,1").unwrap_err().contains("line 2"));
        assert!(parse_csv("a,b").is_err());
        assert!(parse_csv("# only a comment").is_err());
    }
}
