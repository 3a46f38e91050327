//! Crash recovery: the walk that repairs headers of splits cut short and rebuilds the
//! heap's free memory from what the tree reaches.
use super::*;

impl Tree {
    /// Walks the whole tree after a crash: every node whose header depth is not its place
    /// (a split cut short between publishing the new node and moving the old one down) gets
    /// its header rebuilt from a leaf below; an emptied subtree in that state is dropped.
    /// The heap's free memory is then what the tree does not reach.
    /// Returns (nodes, leaves, headers repaired).
    pub fn recover(&mut self, r: &dyn LocalRegion) -> Result<(u64, u64, u64), TreeError> {
        let mut counts = (0, 0, 0);
        let mut reach = Vec::new();
        self.repair(r, self.sb + SB_ROOT, 0, &mut counts, &mut reach)?;
        self.heap.rebuild(&mut reach);
        Ok(counts)
    }

    fn repair(
        &mut self,
        r: &dyn LocalRegion,
        slot: u64,
        d: usize,
        counts: &mut (u64, u64, u64),
        reach: &mut Vec<(u64, u64)>,
    ) -> Result<(), TreeError> {
        let p = self.load_ptr(r, slot)?;
        match p {
            Ptr::Null => return Ok(()),
            Ptr::Leaf(o) => {
                let (_, vl) = self.leaf_key(r, o)?;
                reach.push((o, leaf_len(vl) as u64));
                counts.1 += 1;
                return Ok(());
            }
            _ => {}
        }
        counts.0 += 1;
        let mut h = nodes::header(r, p)?;
        if h.depth as usize != d {
            let end = h.depth as usize + h.plen as usize;
            if end < d || end >= self.kind.digits() {
                return Err(corrupt(
                    p.offset(),
                    LayoutError::Inconsistent {
                        what: "node header beyond repair",
                    },
                ));
            }
            let Some(l) = self.min_leaf(r, p)? else {
                r.store_u64(slot, 0)?;
                self.persist(r, slot, 8);
                counts.2 += 1;
                return Ok(());
            };
            let lk = self.leaf_key(r, l)?.0;
            h = Header::with_prefix(d, end - d, |i| self.kind.digit(&lk, i));
            r.store_u64(p.offset(), h.encode())?;
            self.persist(r, p.offset(), 8);
            counts.2 += 1;
        }
        let next = d + h.plen as usize + 1;
        if next > self.kind.digits() {
            return Err(corrupt(
                p.offset(),
                LayoutError::Inconsistent {
                    what: "node deeper than a key",
                },
            ));
        }
        let (slots, n) = {
            let mut ch = Children::new();
            nodes::children(r, p, &mut ch)?;
            let slots: [u64; nodes::FANOUT_MAX] = core::array::from_fn(|i| ch.list[i].slot);
            (slots, ch.len)
        };
        reach.push((p.offset(), nodes::node_len(p) as u64));
        for &s in &slots[..n] {
            self.repair(r, s, next, counts, reach)?;
        }
        Ok(())
    }
}
