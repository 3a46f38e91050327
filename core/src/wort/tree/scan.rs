//! Ordered scans: the leaf of the smallest key at or after a given one.
use super::*;

impl Tree {
    /// The leaf of the smallest key `>= key` (`> key` if `exclusive`).
    pub fn next(
        &self,
        r: &dyn LocalRegion,
        key: &[u8],
        exclusive: bool,
    ) -> Result<Option<u64>, TreeError> {
        let k = canon(key).ok_or(bad("keys are 1 to 16 bytes"))?;
        let root = self.load_ptr(r, self.sb + SB_ROOT)?;
        self.lower_bound(r, root, 0, &k, exclusive)
    }

    fn lower_bound(
        &self,
        r: &dyn LocalRegion,
        p: Ptr,
        d: usize,
        k: &[u8; CANON_LEN],
        excl: bool,
    ) -> Result<Option<u64>, TreeError> {
        match p {
            Ptr::Null => Ok(None),
            Ptr::Leaf(o) => {
                let lk = self.leaf_key(r, o)?.0;
                Ok((lk > *k || (!excl && lk == *k)).then_some(o))
            }
            _ => {
                let h = self.node_header(r, p, d)?;
                let mut lk = None;
                for i in 0..h.plen as usize {
                    let Some(pd) = self.prefix_digit(r, p, &h, i, &mut lk)? else {
                        return Ok(None);
                    };
                    let kd = self.kind.digit(k, d + i);
                    if pd > kd {
                        return self.min_leaf(r, p);
                    }
                    if pd < kd {
                        return Ok(None);
                    }
                }
                let d2 = d + h.plen as usize;
                let c = self.kind.digit(k, d2);
                let mut ch = Children::new();
                nodes::children(r, p, &mut ch)?;
                for child in ch.as_slice().iter().filter(|x| x.digit >= c) {
                    let cp = self.ptr_of(child.word)?;
                    let found = if child.digit == c {
                        self.lower_bound(r, cp, d2 + 1, k, excl)?
                    } else {
                        self.min_leaf(r, cp)?
                    };
                    if found.is_some() {
                        return Ok(found);
                    }
                }
                Ok(None)
            }
        }
    }
}
