//! Guttman's R-tree mechanisms the basic tree's insert uses: ChooseLeaf's least-enlargement
//! pick and the quadratic split.
use super::CatfishError;
use super::tree::bad;
use remora_layouts::catfish::{Entry, MAX_FANOUT, Node, Rect, min_fill};

/// The entry needing the least enlargement to cover `rect`; ties go to the smaller area.
pub(super) fn choose_subtree(node: &Node, rect: &Rect) -> Option<usize> {
    node.entries()
        .iter()
        .enumerate()
        .min_by_key(|(_, e)| {
            let area = e.rect.area();
            (e.rect.union(rect).area() - area, area)
        })
        .map(|(i, _)| i)
}

/// Guttman's quadratic split of a full node plus one entry into two nodes of its level.
pub(super) fn quadratic_split(node: &Node, extra: Entry) -> Result<(Node, Node), CatfishError> {
    let fanout = node.fanout as usize;
    let min = min_fill(fanout);
    let mut all = [extra; MAX_FANOUT + 1];
    all[..node.entries().len()].copy_from_slice(node.entries());
    let n = node.entries().len() + 1;
    let all = &all[..n];
    // Seeds: the pair wasting the most area if put together.
    let (mut s1, mut s2, mut worst) = (0, 1, i128::MIN);
    for i in 0..n {
        for j in i + 1..n {
            let waste = all[i].rect.union(&all[j].rect).area() as i128
                - all[i].rect.area() as i128
                - all[j].rect.area() as i128;
            if waste > worst {
                (s1, s2, worst) = (i, j, waste);
            }
        }
    }
    let mut a = Node::with_fanout(node.level, fanout);
    let mut b = Node::with_fanout(node.level, fanout);
    let mut placed = [false; MAX_FANOUT + 1];
    a.push(all[s1])?;
    b.push(all[s2])?;
    placed[s1] = true;
    placed[s2] = true;
    let (mut ra, mut rb) = (all[s1].rect, all[s2].rect);
    let mut left = n - 2;
    while left > 0 {
        // A group that needs every remaining entry to reach the minimum takes them all.
        let force = if (a.count as usize) + left <= min {
            Some(true)
        } else if (b.count as usize) + left <= min {
            Some(false)
        } else {
            None
        };
        let pick = (0..n)
            .filter(|&i| !placed[i])
            .max_by_key(|&i| {
                let da = ra.union(&all[i].rect).area() - ra.area();
                let db = rb.union(&all[i].rect).area() - rb.area();
                da.abs_diff(db)
            })
            .ok_or(bad("split ran out of entries"))?;
        let to_a = force.unwrap_or_else(|| {
            let da = ra.union(&all[pick].rect).area() - ra.area();
            let db = rb.union(&all[pick].rect).area() - rb.area();
            (da, ra.area(), a.count) <= (db, rb.area(), b.count)
        });
        if to_a {
            a.push(all[pick])?;
            ra = ra.union(&all[pick].rect);
        } else {
            b.push(all[pick])?;
            rb = rb.union(&all[pick].rect);
        }
        placed[pick] = true;
        left -= 1;
    }
    Ok((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use remora_layouts::catfish::{FANOUT, MIN_FILL};
    use std_alloc::vec::Vec;

    #[test]
    fn split_keeps_every_entry_and_the_minimum_fill() {
        let mut node = Node::empty(0);
        for i in 0..FANOUT as i32 {
            let r = Rect::new(i * i, i, i * i + 2, i + 1).unwrap();
            node.push(Entry {
                rect: r,
                ptr: i as u64,
            })
            .unwrap();
        }
        let extra = Entry {
            rect: Rect::new(-50, -50, -40, -40).unwrap(),
            ptr: 999,
        };
        let (a, b) = quadratic_split(&node, extra).unwrap();
        assert!(a.count as usize >= MIN_FILL && b.count as usize >= MIN_FILL);
        let mut ids: Vec<u64> = a
            .entries()
            .iter()
            .chain(b.entries())
            .map(|e| e.ptr)
            .collect();
        ids.sort_unstable();
        let mut want: Vec<u64> = (0..FANOUT as u64).collect();
        want.push(999);
        assert_eq!(ids, want);
    }
}
