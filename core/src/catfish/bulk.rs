//! Bulk loading (issue 25): the tree of a set of objects built in the memory node's region
//! at memory speed, by the server's own code, instead of one fast-messaging request per
//! object through the fabric.
//!
//! **What it builds: the tree the clients' inserts make, byte for byte.** Only the server
//! writes a Catfish tree (the paper's rule), so a load by clients is the server's
//! [`Tree::insert`] applied to the objects in the order they arrive, with the arenas the
//! clients hand it: the creating client's first allocator chunk (`Init`, the whole chunk),
//! then, each time an insert finds the arenas full, the next chunk (`Grow`) and the insert
//! again. This module runs exactly that sequence on the region without the fabric: chunks
//! are taken from the region header's cursor by the memory node's CPU
//! ([`claim_chunks`]: the chunk a client's FETCH_AND_ADD would have got, when nothing else
//! allocates on the node meanwhile), the tree is formatted as `Init` formats it (the server's
//! reclamation batch included, which decides when split nodes are reused), and every object
//! goes through [`Tree::insert`]. Loaded in the same order by one client (as `remora bench`'s
//! sim load does), the result is the same bytes: node images, versions and birth epochs,
//! arena records, superblock (root, epoch), free space; `remora bench`'s tests compare the two
//! images whole. Only the superblock's heartbeat word differs: a bulk load has no server
//! load to report (0, as a freshly formatted tree has it); the server writes it at its
//! first heartbeat.
//!
//! **Persisted as inserts persist it.** Every node, arena record and superblock word is
//! written and persisted by the same code as for inserts, so a crash in the middle leaves
//! what a crash between two inserts leaves, and [`Tree::recover`] (the server's restart)
//! checks and reopens the result like any tree.
use super::client::GROW_RETRIES;
use super::tree::{Tree, bad};
use super::{CatfishError, Rect, TreeKind};
use crate::server::{LocalRegion, claim_chunks};
use remora_layouts::catfish::{FANOUT, ROOT_SLOT};
use remora_layouts::region::{HEADER_LEN, RegionHeader, root_offset};

/// What a bulk load built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BulkStats {
    /// Objects inserted.
    pub objects: u64,
    /// Allocator chunks given to the tree as arenas (the first one included).
    pub arenas: u64,
    /// Nodes carved (the superblock included).
    pub nodes: u64,
}

impl Tree {
    /// Builds in `region`, which must hold no tree yet (root slot [`ROOT_SLOT`] empty), the
    /// tree of `kind` and `fanout` (0: [`FANOUT`]) that inserting `objects` (rectangle,
    /// object id) in order through the server makes, retiring split nodes in batches of
    /// `reclaim_batch` (the server's, [`super::CatfishServer::with_reclaim_batch`]); see the
    /// module doc. An object the server would refuse (an inverted rectangle) fails the load
    /// with the insert's error, as does a region with no chunk left
    /// ([`CatfishError::NodeFull`]).
    pub fn bulk_load(
        region: &dyn LocalRegion,
        fanout: usize,
        kind: TreeKind,
        reclaim_batch: u64,
        objects: impl IntoIterator<Item = (Rect, u64)>,
    ) -> Result<(Tree, BulkStats), CatfishError> {
        if region.load_u64(root_offset(ROOT_SLOT))? != 0 {
            return Err(bad("bulk load needs a region holding no tree"));
        }
        let mut hb = [0u8; HEADER_LEN];
        region.read(0, &mut hb)?;
        let chunk = RegionHeader::decode(&hb)
            .map_err(CatfishError::Layout)?
            .chunk_size;
        let full = CatfishError::NodeFull {
            node: region.node(),
            region_len: region.len(),
        };
        let take = || claim_chunks(region, chunk)?.ok_or(full);
        let fanout = if fanout == 0 { FANOUT } else { fanout };
        let mut t = Tree::format_kind(region, take()?, chunk, fanout, kind)?;
        t.set_reclaim_batch(reclaim_batch);
        let mut st = BulkStats {
            arenas: 1,
            ..BulkStats::default()
        };
        for (rect, id) in objects {
            let mut grows = 0;
            loop {
                match t.insert(region, rect, id) {
                    Ok(()) => break,
                    // As the client does on `Full`: another chunk, and the insert again.
                    Err(CatfishError::Full) if grows < GROW_RETRIES => {
                        t.grow(region, take()?, chunk)?;
                        grows += 1;
                        st.arenas += 1;
                    }
                    Err(e) => return Err(e),
                }
            }
            st.objects += 1;
        }
        st.nodes = t.nodes();
        Ok((t, st))
    }
}
