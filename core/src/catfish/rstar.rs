//! The R*-tree's choices (Beckmann, Kriegel, Schneider, Seeger, SIGMOD 1990), as pure
//! functions over a node's entries: ChooseSubtree, the entries a forced reinsert takes out,
//! and the split by margin, overlap and area.
use remora_layouts::catfish::{Entry, Rect};
use std_alloc::vec::Vec;

/// Share of a full node's entries a forced reinsert takes out (the paper's p = 30 %).
pub const REINSERT_PERCENT: usize = 30;

fn overlap(a: &Rect, b: &Rect) -> u128 {
    if !a.intersects(b) {
        return 0;
    }
    let w = (a.max_x.min(b.max_x) as i64 - a.min_x.max(b.min_x) as i64 + 1) as u128;
    let h = (a.max_y.min(b.max_y) as i64 - a.min_y.max(b.min_y) as i64 + 1) as u128;
    w * h
}

fn margin(r: &Rect) -> u128 {
    (r.max_x as i64 - r.min_x as i64 + 1) as u128 + (r.max_y as i64 - r.min_y as i64 + 1) as u128
}

fn mbr(es: &[Entry]) -> Rect {
    es.iter()
        .skip(1)
        .fold(es[0].rect, |acc, e| acc.union(&e.rect))
}

/// ChooseSubtree: the entry of a node at `level` (> 0) to descend into for `rect`. Just
/// above the leaves, the least overlap enlargement (ties: least area enlargement, then least
/// area); higher up, the least area enlargement (ties: least area).
pub fn choose_subtree(entries: &[Entry], level: u16, rect: &Rect) -> Option<usize> {
    let enlargement = |e: &Entry| e.rect.union(rect).area() - e.rect.area();
    if level != 1 {
        return entries
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| (enlargement(e), e.rect.area()))
            .map(|(i, _)| i);
    }
    entries
        .iter()
        .enumerate()
        .min_by_key(|&(i, e)| {
            let grown = e.rect.union(rect);
            let mut delta: i128 = 0;
            for (j, o) in entries.iter().enumerate() {
                if j != i {
                    delta += overlap(&grown, &o.rect) as i128 - overlap(&e.rect, &o.rect) as i128;
                }
            }
            (delta, enlargement(e), e.rect.area())
        })
        .map(|(i, _)| i)
}

/// Squared distance between the centres of two rectangles (in half-cells, exact).
fn centre_distance(a: &Rect, b: &Rect) -> u128 {
    let cx = |r: &Rect| r.min_x as i64 + r.max_x as i64;
    let cy = |r: &Rect| r.min_y as i64 + r.max_y as i64;
    let dx = (cx(a) - cx(b)).unsigned_abs() as u128;
    let dy = (cy(a) - cy(b)).unsigned_abs() as u128;
    dx * dx + dy * dy
}

/// Forced reinsert: of an overflowing node's entries (`fanout + 1` of them), the
/// `REINSERT_PERCENT` whose centres lie farthest from the centre of their bounding
/// rectangle. Returns (kept, taken out), the taken ones nearest first (the paper's "close
/// reinsert").
pub fn pick_reinsert(entries: &[Entry], fanout: usize) -> (Vec<Entry>, Vec<Entry>) {
    let p = (fanout * REINSERT_PERCENT / 100).max(1);
    let centre = mbr(entries);
    let mut sorted: Vec<Entry> = entries.to_vec();
    sorted.sort_by_key(|e| centre_distance(&e.rect, &centre));
    let out = sorted.split_off(sorted.len() - p.min(sorted.len() - 1));
    (sorted, out)
}

/// The R* split of `entries` (a full node plus one) into two groups of at least `min`:
/// the axis whose distributions have the least total margin, then on it the distribution
/// with the least overlap (ties: least total area).
pub fn split(entries: &[Entry], min: usize) -> (Vec<Entry>, Vec<Entry>) {
    let n = entries.len();
    let min = min.clamp(1, n / 2);
    let sorts = |axis_x: bool| -> [Vec<Entry>; 2] {
        let mut by_low = entries.to_vec();
        let mut by_high = entries.to_vec();
        if axis_x {
            by_low.sort_by_key(|e| (e.rect.min_x, e.rect.max_x));
            by_high.sort_by_key(|e| (e.rect.max_x, e.rect.min_x));
        } else {
            by_low.sort_by_key(|e| (e.rect.min_y, e.rect.max_y));
            by_high.sort_by_key(|e| (e.rect.max_y, e.rect.min_y));
        }
        [by_low, by_high]
    };
    let margins = |orders: &[Vec<Entry>; 2]| -> u128 {
        let mut total = 0;
        for o in orders {
            for k in min..=n - min {
                total += margin(&mbr(&o[..k])) + margin(&mbr(&o[k..]));
            }
        }
        total
    };
    let (x, y) = (sorts(true), sorts(false));
    let orders = if margins(&x) <= margins(&y) { x } else { y };
    let mut best: Option<((u128, u128), usize, usize)> = None;
    for (oi, o) in orders.iter().enumerate() {
        for k in min..=n - min {
            let (a, b) = (mbr(&o[..k]), mbr(&o[k..]));
            let key = (overlap(&a, &b), a.area() + b.area());
            if best.is_none_or(|(bk, _, _)| key < bk) {
                best = Some((key, oi, k));
            }
        }
    }
    let (_, oi, k) = best.unwrap_or(((0, 0), 0, n / 2));
    let mut a = orders[oi].clone();
    let b = a.split_off(k);
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(x: i32, y: i32, w: i32, id: u64) -> Entry {
        Entry {
            rect: Rect::new(x, y, x + w, y + w).unwrap(),
            ptr: id,
        }
    }

    #[test]
    fn split_separates_two_clusters_on_the_right_axis() {
        let mut es = Vec::new();
        for i in 0..8 {
            es.push(e(i * 3, 0, 2, i as u64));
            es.push(e(1000 + i * 3, 5, 2, 100 + i as u64));
        }
        let (a, b) = split(&es, 6);
        assert_eq!((a.len(), b.len()), (8, 8));
        let left = |g: &Vec<Entry>| g.iter().all(|e| e.ptr < 100);
        assert!(left(&a) != left(&b) && (left(&a) || left(&b)));
        assert!(b.iter().chain(&a).filter(|e| e.ptr >= 100).count() == 8);
    }

    #[test]
    fn reinsert_takes_the_farthest_and_overlap_guides_the_leaf_choice() {
        let mut es: Vec<Entry> = (0..9).map(|i| e(100 + i, 100, 1, i as u64)).collect();
        es.push(e(10_000, 10_000, 1, 99));
        let (kept, out) = pick_reinsert(&es, 9);
        assert_eq!(kept.len() + out.len(), 10);
        assert_eq!(out.last().unwrap().ptr, 99, "the outlier is the farthest");
        // Just above the leaves the least overlap enlargement wins even against a smaller
        // area enlargement: growing the wide node down to the point would overlap the other.
        let nodes = [
            Entry {
                rect: Rect::new(0, 0, 100, 10).unwrap(),
                ptr: 0,
            },
            Entry {
                rect: Rect::new(50, 12, 60, 20).unwrap(),
                ptr: 1,
            },
        ];
        let r = Rect::new(5, 14, 5, 14).unwrap();
        // Areas grow by 101 * 4 = 404 and 56 * 9 - 99 = 405.
        assert_eq!(
            choose_subtree(&nodes, 2, &r),
            Some(0),
            "higher up: least area"
        );
        assert_eq!(
            choose_subtree(&nodes, 1, &r),
            Some(1),
            "above leaves: no overlap"
        );
    }
}
