//! The Hilbert curve of the Hilbert R-tree (Kamel and Faloutsos, VLDB 1994): a rectangle's
//! key is the Hilbert value of its centre on the 2^32 x 2^32 grid of `i32` coordinates.
use remora_layouts::catfish::Rect;

/// Hilbert value (order 32, 64 bits) of the cell `(x, y)`.
pub fn hilbert_d(x: u32, y: u32) -> u64 {
    let (mut x, mut y) = (x, y);
    let mut d = 0u64;
    let mut s: u32 = 1 << 31;
    while s > 0 {
        let rx = u64::from(x & s != 0);
        let ry = u64::from(y & s != 0);
        d += (s as u64) * (s as u64) * ((3 * rx) ^ ry);
        // Rotate the quadrant so the curve continues.
        if ry == 0 {
            if rx == 1 {
                x = u32::MAX - x;
                y = u32::MAX - y;
            }
            core::mem::swap(&mut x, &mut y);
        }
        s >>= 1;
    }
    d
}

/// The Hilbert value of a rectangle's centre.
pub fn key(r: &Rect) -> u64 {
    let to_u = |lo: i32, hi: i32| ((lo as i64 + hi as i64) / 2 - i32::MIN as i64) as u32;
    hilbert_d(to_u(r.min_x, r.max_x), to_u(r.min_y, r.max_y))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a small grid the curve visits every cell once and each step moves to a neighbour.
    #[test]
    fn the_curve_is_a_walk_through_every_cell() {
        // The top 29 bits zero: the curve's first 8 x 8 block.
        let mut cells: std_alloc::vec::Vec<(u64, u32, u32)> = std_alloc::vec::Vec::new();
        for x in 0..8u32 {
            for y in 0..8u32 {
                cells.push((hilbert_d(x, y), x, y));
            }
        }
        cells.sort_unstable();
        for (i, c) in cells.iter().enumerate() {
            assert_eq!(
                c.0, i as u64,
                "the block's cells are the curve's first 64 values"
            );
        }
        for w in cells.windows(2) {
            let (dx, dy) = (w[0].1.abs_diff(w[1].1), w[0].2.abs_diff(w[1].2));
            assert_eq!(dx + dy, 1, "{:?} -> {:?} is not a step", w[0], w[1]);
        }
        assert_ne!(hilbert_d(u32::MAX, 0), hilbert_d(0, u32::MAX));
    }
}
