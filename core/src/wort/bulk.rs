//! Bulk loading (issue 25): WORT's or WOART's tree of a set of sorted keys built in the
//! memory node's region at memory speed, by the server's own code, instead of one request
//! (and its flushes) per key.
//!
//! **What it builds: the tree inserts in sorted order make, node for node.** A radix tree
//! with path compression has one shape per key set: a set of one key is a leaf; a larger
//! set is a node at digit `d` whose prefix is the digits its keys share from `d` up to the
//! first where they differ (`m`), with one child per digit at `m`, each the tree of its keys
//! from `m + 1`. Inserts reach exactly that shape whatever their order (a leaf meeting
//! another key and a path-compression split both make that node; a split moves the old node
//! down with the shorter prefix). With inserts only, a WOART node is the smallest type that
//! holds its children (NODE4 .. NODE256: a node grows by one size when one more child does
//! not fit), and in sorted order every child arrives after the smaller digits, so a NODE4's
//! or NODE16's slots and a NODE48's index hold the children in digit order. The bulk loader
//! builds that: every node's bytes (header word with depth, prefix length and first
//! [`PREFIX_MAX`] prefix digits, bitmap, key slots, NODE48 index, child words' tags) and
//! every leaf's bytes are those sorted inserts leave. Only where they lie differs: the
//! heap is written compactly (children before their node), where inserts leave holes (a
//! grown node's old copy, freed and later reused) in another order. The tests compare both
//! trees' shapes byte for byte with the child offsets left out
//! (`wort/bulk_tests.rs`, `poller/tests/wort_bulk.rs`).
//!
//! **Persisted as the server's recovery expects.** The tree is built under an empty root
//! word of a formatted store ([`Tree::format`]): every leaf and node is allocated by the
//! heap (whose durable mark is persisted ahead of use and which claims the region's chunks
//! as it grows, as for inserts), written and persisted; then one persisted 8-byte store of
//! the root word publishes the whole tree. A crash before that store leaves an empty tree
//! whose recovery takes the written memory back as free; after it, recovery
//! ([`Tree::recover`]) walks a tree with every header at its place (nothing to repair) and
//! rebuilds the heap's free memory from what it reaches.
use super::layout::*;
use super::nodes::Image;
use super::server::WortServer;
use super::tree::Tree;
use crate::fabric::FabricError;
use crate::server::LocalRegion;

/// What a bulk load built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BulkStats {
    /// Keys (leaves) written.
    pub keys: u64,
    /// Inner nodes by type: WORT's NODE16, then WOART's NODE4, NODE16, NODE48, NODE256.
    pub nodes: [u64; 5],
    /// Bytes of the heap the tree takes (allocations rounded to 64 bytes).
    pub bytes: u64,
    /// Most inner nodes on a root-to-leaf path.
    pub height: usize,
}

fn refuse(what: &'static str) -> TreeError {
    TreeError::Fabric(FabricError::Unsupported { what })
}

/// The smallest node type of `kind` holding `children` children (offset 0), and its index
/// in [`BulkStats::nodes`].
fn node_type(kind: Kind, children: usize) -> (Ptr, usize) {
    match kind {
        Kind::Wort => (Ptr::N16Direct(0), 0),
        Kind::Woart => match children {
            0..=4 => (Ptr::N4(0), 1),
            5..=16 => (Ptr::N16(0), 2),
            17..=48 => (Ptr::N48(0), 3),
            _ => (Ptr::N256(0), 4),
        },
    }
}

/// `p`'s type at offset `o`.
fn at(p: Ptr, o: u64) -> Ptr {
    match p {
        Ptr::N16Direct(_) => Ptr::N16Direct(o),
        Ptr::N4(_) => Ptr::N4(o),
        Ptr::N16(_) => Ptr::N16(o),
        Ptr::N48(_) => Ptr::N48(o),
        Ptr::N256(_) => Ptr::N256(o),
        Ptr::Null | Ptr::Leaf(_) => Ptr::Leaf(o),
    }
}

/// The keys and values of a bulk load, sorted by key.
struct Keys<'p, K, V>(&'p [(K, V)]);

impl<K: AsRef<[u8]>, V: AsRef<[u8]>> Keys<'_, K, V> {
    /// Canonical key `i` (checked by [`Tree::bulk_load`] before the build).
    fn canon(&self, i: usize) -> [u8; CANON_LEN] {
        canon(self.0[i].0.as_ref()).unwrap_or([0; CANON_LEN])
    }
}

impl Tree {
    /// Builds and publishes the tree of `pairs` (key, value), sorted by key with no key
    /// twice, into this tree, which must be empty (a store just formatted); see the module
    /// comment for the shape and how it is persisted. Keys are 1 to [`KEY_MAX`] bytes and
    /// values at most [`VALUE_MAX`]; pairs out of order, a repeated key, a bad length or a
    /// tree that holds keys are refused before anything is written.
    pub fn bulk_load<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        r: &dyn LocalRegion,
        pairs: &[(K, V)],
    ) -> Result<BulkStats, TreeError> {
        if r.load_u64(self.sb + SB_ROOT)? != 0 {
            return Err(refuse("bulk load into a WORT/WOART tree that holds keys"));
        }
        let keys = Keys(pairs);
        let mut prev: Option<[u8; CANON_LEN]> = None;
        for (k, v) in pairs {
            let c = canon(k.as_ref()).ok_or(refuse("bulk load: keys are 1 to 16 bytes"))?;
            if v.as_ref().len() > VALUE_MAX {
                return Err(refuse("bulk load: values are at most 256 bytes"));
            }
            if prev.is_some_and(|p| p >= c) {
                return Err(refuse(
                    "bulk load: keys must be sorted ascending, none twice",
                ));
            }
            prev = Some(c);
        }
        let mut st = BulkStats::default();
        if pairs.is_empty() {
            return Ok(st);
        }
        let root = self.build(r, &keys, 0, pairs.len(), 0, 0, &mut st)?;
        // Everything below is persisted: one store publishes it.
        r.store_u64(self.sb + SB_ROOT, root)?;
        self.persist(r, self.sb + SB_ROOT, 8);
        self.stats.inserts += st.keys;
        self.stats.new_nodes += st.nodes.iter().sum::<u64>();
        Ok(st)
    }

    /// Writes the subtree of keys `lo..hi` (more than none) whose digits before `d` they all
    /// share, `level` inner nodes below the root; returns the child word naming it.
    #[allow(clippy::too_many_arguments)]
    fn build<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        r: &dyn LocalRegion,
        keys: &Keys<'_, K, V>,
        lo: usize,
        hi: usize,
        d: usize,
        level: usize,
        st: &mut BulkStats,
    ) -> Result<u64, TreeError> {
        let kind = self.kind;
        let first = keys.canon(lo);
        if hi - lo == 1 {
            let (k, v) = &keys.0[lo];
            let mut img = [0u8; LEAF_MAX];
            let n = encode_leaf(&mut img, k.as_ref(), v.as_ref());
            let o = self.alloc(r, n)?;
            r.write(o, &img[..n])?;
            self.persist(r, o, n);
            st.keys += 1;
            st.bytes += (n as u64).next_multiple_of(64);
            st.height = st.height.max(level);
            return Ok(Ptr::Leaf(o).encode());
        }
        // Sorted: the keys' common digits are the first and last key's.
        let last = keys.canon(hi - 1);
        let mut m = d;
        while m < kind.digits() && kind.digit(&first, m) == kind.digit(&last, m) {
            m += 1;
        }
        if m >= kind.digits() {
            return Err(refuse("bulk load: a key given twice"));
        }
        let mut children = 0;
        let mut prev = None;
        for i in lo..hi {
            let c = kind.digit(&keys.canon(i), m);
            if prev != Some(c) {
                children += 1;
                prev = Some(c);
            }
        }
        let (ty, which) = node_type(kind, children);
        let mut img = Image::new(ty, Header::with_prefix(d, m - d, |i| kind.digit(&first, i)));
        let mut i = lo;
        while i < hi {
            let c = kind.digit(&keys.canon(i), m);
            let mut j = i + 1;
            while j < hi && kind.digit(&keys.canon(j), m) == c {
                j += 1;
            }
            let word = self.build(r, keys, i, j, m + 1, level + 1, st)?;
            img.add(ty, c, word);
            i = j;
        }
        let o = self.alloc(r, img.len)?;
        r.write(o, &img.buf[..img.len])?;
        self.persist(r, o, img.len);
        st.nodes[which] += 1;
        st.bytes += (img.len as u64).next_multiple_of(64);
        Ok(at(ty, o).encode())
    }
}

impl WortServer {
    /// Formats this server's store in `r` (which holds none yet) and bulk-loads `pairs`
    /// into it ([`Tree::bulk_load`]), before any client connects; a server started on the
    /// region later (or this one after [`Handler::recover`](crate::server::Handler)) opens
    /// and recovers it.
    pub fn bulk_load<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        r: &dyn LocalRegion,
        pairs: &[(K, V)],
    ) -> Result<BulkStats, TreeError> {
        let kind = self.kind();
        if r.load_u64(remora_layouts::region::root_offset(kind.root_slot()))? != 0 {
            return Err(refuse(
                "bulk load into a region that holds a WORT/WOART store",
            ));
        }
        self.open(r).map_err(TreeError::Fabric)?;
        let tree = self
            .tree_mut()
            .ok_or(refuse("the WORT/WOART store did not open"))?;
        tree.bulk_load(r, pairs)
    }
}

#[cfg(test)]
#[path = "bulk_tests.rs"]
mod tests;
