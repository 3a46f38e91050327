//! Node images as a one-sided READ sees them while the server rewrites the node in place:
//! each 64-byte segment of the READ observes memory at its own moment, in ascending address
//! order or in any order. The reader's check ([`Node::decode`]: a CRC-64 over the head
//! version and the body) must accept only whole images whatever the order; a check that
//! trusts the head and tail versions alone holds only when segments land in ascending
//! order (the mutant below), and is caught here under shuffled order.
extern crate std;
use super::tree::Tree;
use crate::fabric::{FabricError, SegmentOrder};
use crate::server::LocalRegion;
use core::cell::RefCell;
use remora_layouts::catfish::{ENTRY_LEN, Entry, NODE_LEN, Node, RECT_LEN, Rect};
use remora_layouts::{LayoutError, NodeId};
use std::vec;
use std::vec::Vec;

/// One write of the server: offset, the bytes it replaced, the bytes it wrote.
type Logged = (u64, Vec<u8>, Vec<u8>);

/// A plain-memory region that logs every write, so any node's successive images during
/// one insert can be replayed.
struct LogRegion {
    mem: RefCell<Vec<u8>>,
    log: RefCell<Vec<Logged>>,
}

impl LocalRegion for LogRegion {
    fn node(&self) -> NodeId {
        0
    }
    fn len(&self) -> u64 {
        self.mem.borrow().len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        let m = self.mem.borrow();
        let src = m
            .get(offset as usize..offset as usize + buf.len())
            .ok_or(crate::server::out_of_range(0, offset, buf.len()))?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        let mut m = self.mem.borrow_mut();
        let dst = m
            .get_mut(offset as usize..offset as usize + data.len())
            .ok_or(crate::server::out_of_range(0, offset, data.len()))?;
        self.log
            .borrow_mut()
            .push((offset, dst.to_vec(), data.to_vec()));
        dst.copy_from_slice(data);
        Ok(())
    }
}

/// Copies the part of a logged write that falls in the node at `node` into `img`.
fn apply(img: &mut [u8], node: u64, at: u64, bytes: &[u8]) {
    for (i, b) in bytes.iter().enumerate() {
        let a = at + i as u64;
        if a >= node && a < node + NODE_LEN as u64 {
            img[(a - node) as usize] = *b;
        }
    }
}

/// Successive images of every node the last insert rewrote in place (its head version
/// stored odd: the seqlock's first store), from before the insert to after it.
fn rewrites(region: &LogRegion) -> Vec<(u64, Vec<Vec<u8>>)> {
    let log = region.log.borrow();
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for (at, old, new) in log.iter() {
        if new.len() != 8 || seen.contains(at) {
            continue;
        }
        let v = u64::from_le_bytes(new[..].try_into().unwrap());
        let was = u64::from_le_bytes(old[..].try_into().unwrap());
        if v & 1 == 0 || was + 1 != v {
            continue;
        }
        seen.push(*at);
        let node = *at;
        let mut img = vec![0u8; NODE_LEN];
        region.read(node, &mut img).unwrap();
        for (a, old, _) in log.iter().rev() {
            apply(&mut img, node, *a, old);
        }
        let mut states = vec![img.clone()];
        for (a, _, new) in log.iter() {
            let before = img.clone();
            apply(&mut img, node, *a, new);
            if img != before {
                states.push(img.clone());
            }
        }
        out.push((node, states));
    }
    out
}

/// The mutant: accepts an image whose head and tail versions are equal and even, without
/// the checksum (as a seqlock reader may when a READ observes ascending addresses and the
/// writer's stores fall between its segments).
fn decode_by_version_pair(img: &[u8]) -> Result<(u16, Vec<Entry>), LayoutError> {
    let word = |at: usize| u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
    let (head, tail) = (word(0), word(NODE_LEN - 8));
    if head != tail || head & 1 == 1 {
        return Err(LayoutError::Inconsistent {
            what: "versions differ",
        });
    }
    let meta = word(8);
    let count = (meta >> 48) as usize;
    if count > remora_layouts::catfish::FANOUT {
        return Err(LayoutError::Inconsistent { what: "count" });
    }
    let mut entries = Vec::new();
    for i in 0..count {
        let at = 16 + i * ENTRY_LEN;
        entries.push(Entry {
            rect: Rect::decode(img, at)?,
            ptr: word(at + RECT_LEN),
        });
    }
    Ok(((meta >> 32) as u16, entries))
}

fn content(n: &Node) -> (u16, Vec<Entry>) {
    (n.level, n.entries().to_vec())
}

/// READs of nodes being rewritten, their segments observing successive images in `order`.
/// Returns (images accepted, accepted images that are no whole image the node ever had)
/// for the real check and for the mutant.
fn torn_reads(order: SegmentOrder) -> [(u32, u32); 2] {
    let region = LogRegion {
        mem: RefCell::new(vec![0u8; 1 << 20]),
        log: RefCell::new(Vec::new()),
    };
    let mut t = Tree::format(&region, 4096, (1 << 20) - 4096).unwrap();
    let mut x = 0x0123_4567_89AB_CDEFu64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut counts = [(0u32, 0u32); 2];
    for id in 0..300u64 {
        let (px, py) = ((next() % 5000) as i32, (next() % 5000) as i32);
        let r = Rect::new(px, py, px + (next() % 200) as i32, py + 50).unwrap();
        region.log.borrow_mut().clear();
        t.insert(&region, r, id).unwrap();
        for (node, states) in rewrites(&region) {
            let whole: Vec<(u16, Vec<Entry>)> = states
                .iter()
                .filter_map(|s| Node::decode(s).ok())
                .map(|n| content(&n))
                .collect();
            // Before and after each rewrite (an insert may rewrite a node twice).
            assert!(whole.len() >= 2, "an in-place rewrite without whole images");
            for _ in 0..20 {
                let mut segs = Vec::new();
                order.for_each_segment(node, NODE_LEN, false, &mut seed, |s, e| segs.push(s..e));
                // The i-th segment read observes the image at the i-th of these moments.
                let mut when: Vec<usize> = (0..segs.len())
                    .map(|_| (next() % states.len() as u64) as usize)
                    .collect();
                when.sort_unstable();
                let mut img = vec![0u8; NODE_LEN];
                for (r, &w) in segs.into_iter().zip(&when) {
                    img[r.clone()].copy_from_slice(&states[w][r]);
                }
                let got = [
                    Node::decode(&img).ok().map(|n| content(&n)),
                    decode_by_version_pair(&img).ok(),
                ];
                for (c, g) in counts.iter_mut().zip(got) {
                    if let Some(g) = g {
                        c.0 += 1;
                        if !whole.contains(&g) {
                            c.1 += 1;
                        }
                    }
                }
            }
        }
    }
    counts
}

#[test]
fn node_checks_hold_under_any_segment_order() {
    let [real, mutant] = torn_reads(SegmentOrder::Shuffled);
    assert_eq!(real.1, 0, "the CRC-64 check accepted a torn image");
    assert!(real.0 > 500, "only {} images accepted", real.0);
    assert!(mutant.1 > 0, "the version-pair check was not caught");
    std::println!(
        "shuffled segments: the version-pair check accepted {} torn images of {}",
        mutant.1,
        mutant.0
    );
    let [real, mutant] = torn_reads(SegmentOrder::Ascending);
    assert_eq!(real.1, 0);
    // The version pair is sound when segments land in ascending order.
    assert_eq!(
        mutant.1, 0,
        "the version-pair check failed in ascending order"
    );
}
