//! Load once, measure many (Catfish on the sim): the paper's tree holds 2 million
//! rectangles (seeds/003 §5.2), which take a minute of host CPU to insert through the sim,
//! and a report measures the same tree at three client counts and in three modes. So a sim
//! run loads its tree in a sim of its own, by one client (the objects are inserted in their
//! order whatever the run's client count or model: the tree depends on the objects alone),
//! keeps the memory image, and measures in a fresh sim started from a copy of it, whose
//! server recovers the tree from the region (`Tree::recover`, as after a restart). Every run
//! starts from a copy, so a point's figures are the same whether its load was made here or
//! found.
//!
//! Bulk loading (issue 25; the default where the load is not measured, `--no-bulk-load`
//! inserts): the same tree without the fabric, built into memory node 0's image by the
//! server's own inserts of the objects in object order (core's `catfish/bulk.rs`: the tree
//! the one-client load makes, byte for byte, only the superblock's heartbeat word left at
//! 0), then saved and measured as above (the tests compare the two images). It saves the
//! fabric's and the sim's share only: the load is the server's own insert code (the
//! R*-tree's overlap-minimising descent above all), so at the paper's 2M rectangles a
//! catfish-small point with `--operations 10 --warmup 0` took 32.8 s of CPU bulk-loaded
//! against 38-39 s inserted.
use super::{Part, Shared};
use crate::args::FabricKind;
use crate::bench::BenchArgs;
use crate::bench::bulk::copy_images;
use crate::bench::ycsb::Workload;
use remora::core::FabricError;
use remora::core::server::{LocalRegion, out_of_range};
use remora::layouts::NodeId;
use remora::poller::sim::{NodeImage, Sim, SimConfig, WarmLines};
use std::cell::RefCell;

/// Loaded trees kept: a report's experiments alternate at most two (tree sizes, node
/// sizes), and each image of the paper's 2M-rectangle tree holds ~100 MB.
const KEPT: usize = 2;

/// A loaded cluster: its memory images and the loading client's LOAD phase (timed in the
/// sim model `model`).
struct Loaded {
    identity: String,
    images: Vec<NodeImage>,
    model: String,
    parts: Vec<Part>,
}

thread_local! {
    static LOADED: RefCell<Vec<Loaded>> = const { RefCell::new(Vec::new()) };
}

/// What makes two runs' loaded trees the same: the tree (kind, fanout), the objects
/// (their number, data, zoom, seed) and whether they were bulk-loaded (a bulk load has no
/// LOAD figures to hand on). Not the region length (a copy is made as long as the run's),
/// the run's client count, search mode or sim model.
pub(super) fn identity(a: &BenchArgs) -> String {
    let s = &a.spatial;
    format!(
        "{:?}|{}|{}|{}|{:?}|{:?}|{}|{}",
        s.tree,
        s.fanout,
        a.records,
        s.paper_objects,
        s.spatial_data,
        s.data,
        a.sim.seed,
        bulk_wanted(a)
    )
}

/// Whether the run's tree is bulk-loaded: on the sim, where the run measures another
/// workload than LOAD, unless `--no-bulk-load`.
pub(super) fn bulk_wanted(a: &BenchArgs) -> bool {
    a.fabric == FabricKind::Sim && a.workload != Workload::Load && !a.no_bulk_load && a.records > 0
}

/// A fresh cluster's memory images (of `cfg`) with the run's tree bulk-loaded into memory
/// node 0's by the server's own inserts of the objects, in object order (see the module
/// doc; the server as the run's, its replies of `max_message` bytes), and a one-line
/// summary.
pub(super) fn bulk(
    sh: &Shared<'_>,
    cfg: &SimConfig,
    max_message: usize,
) -> Result<(Vec<NodeImage>, String), String> {
    let a = sh.a;
    let mut images = Sim::new(cfg.clone()).map_err(|e| e.0)?.into_images();
    let img = images.first_mut().ok_or("no memory image to load")?;
    let kind = a.spatial.tree.kind();
    let objects = (0..a.records).map(|n| (sh.data.object(n), n));
    let st = super::run::server(a, max_message)
        .bulk_load(
            &ImageRegion::warming(img, 0, cfg),
            a.spatial.fanout,
            kind,
            objects,
        )
        .map_err(|e| format!("Catfish bulk load: {e}"))?;
    Ok((
        images,
        format!(
            "the {} tree of {} objects as one client's inserts in object order make it, built \
             by the server's insert code: {} nodes carved from {} arenas",
            kind.name(),
            st.objects,
            st.nodes,
            st.arenas
        ),
    ))
}

/// A copy of the saved load `identity` (regions at least `region_len` bytes), and its LOAD
/// phase if it was timed in the sim model `model` (none otherwise), if it is saved.
pub(super) fn saved(
    identity: &str,
    model: &str,
    region_len: u64,
) -> Option<(Vec<NodeImage>, Vec<Part>)> {
    LOADED.with(|l| {
        l.borrow().iter().find(|s| s.identity == identity).map(|s| {
            let parts = if s.model == model {
                s.parts.clone()
            } else {
                Vec::new()
            };
            (copy_images(&s.images, region_len), parts)
        })
    })
}

/// Keeps `images` and `parts` (timed in `model`) as the load `identity`, dropping the
/// oldest beyond [`KEPT`].
pub(super) fn save(identity: String, images: Vec<NodeImage>, model: String, parts: Vec<Part>) {
    LOADED.with(|l| {
        let mut l = l.borrow_mut();
        l.retain(|s| s.identity != identity);
        if l.len() >= KEPT {
            l.remove(0);
        }
        l.push(Loaded {
            identity,
            images,
            model,
            parts,
        });
    });
}

/// A memory node's image as its CPU sees it before the sim starts: the server bulk-loads
/// its structure or recovers it through it (one thread, so plain reads and writes). A
/// bulk load's region ([`ImageRegion::warming`]) also notes the lines it touches in the
/// image's [`WarmLines`], so the sim started from the image starts the node's last-level
/// cache as the load left it (poller's `llc.rs`).
pub(crate) struct ImageRegion<'a> {
    bytes: RefCell<&'a mut Vec<u8>>,
    node: NodeId,
    warm: Option<RefCell<&'a mut WarmLines>>,
    /// `persist_evict` drops lines from `warm` (a persistent node's `clflush`).
    evicts: bool,
}

impl<'a> ImageRegion<'a> {
    /// The image `bytes` of memory node `node`.
    pub(crate) fn new(bytes: &'a mut Vec<u8>, node: NodeId) -> ImageRegion<'a> {
        ImageRegion {
            bytes: RefCell::new(bytes),
            node,
            warm: None,
            evicts: false,
        }
    }

    /// The image `img` of memory node `node` of a sim of `cfg`, for a load by the node's
    /// CPU: the lines its reads and writes touch replace `img`'s warm lines (the last
    /// `server_llc_lines` distinct ones are kept), less those it flushes with
    /// `persist_evict` on a persistent node (as the sim's cache drops them).
    pub(crate) fn warming(
        img: &'a mut NodeImage,
        node: NodeId,
        cfg: &SimConfig,
    ) -> ImageRegion<'a> {
        img.warm = WarmLines::new(cfg.model.server_llc_lines as usize);
        ImageRegion {
            bytes: RefCell::new(&mut img.host),
            node,
            warm: Some(RefCell::new(&mut img.warm)),
            evicts: cfg.persistent,
        }
    }

    fn range(&self, offset: u64, len: usize) -> Result<core::ops::Range<usize>, FabricError> {
        let end = offset.checked_add(len as u64);
        match end {
            Some(e) if e <= self.len() => {
                if let Some(w) = &self.warm {
                    w.borrow_mut().touch(offset, len);
                }
                Ok(offset as usize..e as usize)
            }
            _ => Err(out_of_range(self.node, offset, len)),
        }
    }
}

impl LocalRegion for ImageRegion<'_> {
    fn node(&self) -> NodeId {
        self.node
    }
    fn len(&self) -> u64 {
        self.bytes.borrow().len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        let r = self.range(offset, buf.len())?;
        buf.copy_from_slice(&self.bytes.borrow()[r]);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        let r = self.range(offset, data.len())?;
        self.bytes.borrow_mut()[r].copy_from_slice(data);
        Ok(())
    }
    fn persist_evict(&self, offset: u64, len: usize) {
        if let (true, Some(w)) = (self.evicts, &self.warm) {
            w.borrow_mut().evict(offset, len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads and writes land in the image, and a range past its end is refused.
    #[test]
    fn image_region_reads_writes_and_bounds() {
        let mut v = vec![0u8; 64];
        {
            let r = ImageRegion::new(&mut v, 0);
            r.write(8, &[1, 2, 3]).expect("in range");
            let mut b = [0u8; 4];
            r.read(7, &mut b).expect("in range");
            assert_eq!(b, [0, 1, 2, 3]);
            assert!(r.read(62, &mut b).is_err());
            assert!(r.write(u64::MAX, &[1]).is_err());
            assert_eq!(r.load_u64(8).expect("aligned"), 0x0003_0201);
        }
        assert_eq!(&v[8..11], &[1, 2, 3]);
    }
}
