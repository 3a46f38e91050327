//! Sizes of a lookup's futures: every coroutine carries its lookup's frame (the executor
//! keeps one per coroutine), so these bound the memory a lookup's polls touch. Printed with
//! `cargo test --release -p remora-core --features alloc --lib smart::frame_tests --
//! --nocapture`. Measured at a494a78 (rustc of the repository's toolchain): get 23592,
//! get_direct 22824, search_in 9352, read_leaf 8760, read_node 2384, wait_frozen 16264,
//! help_grow 13952 bytes: the largest part was a rare path, the wait on a frozen node (which
//! may finish a dead grower's grow) nested inside the attempt with its leaf buffer, and
//! `read_leaf`'s torn-leaf repair with two leaf buffers of its own. Since the wait runs
//! beside the attempt (`lookup` awaits it between attempts), the repair reads into the
//! reader's own leaf buffer, and `help_grow` keeps each node image only while it needs it:
//! get 17392, get_direct 16624, search_in 2888, read_leaf 1008, read_node 2384, wait_frozen
//! 14176, help_grow 11864. What is left of `get` is mostly `wait_frozen` (`help_grow`'s
//! `complete_freeze` and node images) beside the lookup's node image.
extern crate std;
use super::remote::NodeImg;
use super::search::{self, Count};
use super::tests::{block, endpoint, memory};
use super::*;
use std::println;

/// A lookup's whole frame, and its nesting: each level holds the one below. The bounds are
/// the sizes measured above plus a quarter (room for another rustc's layout, which the
/// repository does not pin): a change that grows a lookup's frame by a buffer or node image
/// held across an await, or a larger rare-path future awaited inside the lookup, fails here
/// and must say why.
#[test]
fn lookup_frames() {
    let m = memory(16 << 20);
    let ep = endpoint(&m);
    let cfg = SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8);
    let s = block(Smart::open(&ep, cfg)).unwrap();
    let k = [7u8; 8];
    let mut out = [0u8; 8];
    let mut buf = [0u8; 256];
    let mut img = None;
    let at = GlobalAddr::new(0, 4096);
    let get = core::mem::size_of_val(&s.get(&k, &mut out));
    let direct = core::mem::size_of_val(&s.get_direct(&k, &mut out));
    let search = core::mem::size_of_val(&s.search_in(&k, &mut buf, &mut img, true, Count::Nothing));
    let leaf = core::mem::size_of_val(&s.read_leaf(at, &mut buf));
    let node = core::mem::size_of_val(&s.read_node(at, NodeType::N4));
    // The rare paths a lookup awaits: waiting on (and helping) a frozen node.
    let n = NodeImg {
        addr: at,
        rev: 0,
        header: Header::new(1, NodeType::N4, &[]).unwrap(),
        slots: [remora_layouts::smart::Slot::EMPTY; 256],
        t0: 0,
    };
    let p = search::Parent {
        addr: at,
        header: n.header,
        idx: 0,
        slot: remora_layouts::smart::Slot::EMPTY,
    };
    let (mut pace, mut w) = (s.pace(), None);
    let frozen =
        core::mem::size_of_val(&s.wait_frozen(&mut pace, &mut w, &n, (None, None), true, false));
    let help = core::mem::size_of_val(&s.help_grow(&n, &p));
    println!(
        "lookup frames (bytes): get {get} get_direct {direct} search_in {search} \
         read_leaf {leaf} read_node {node} wait_frozen {frozen} help_grow {help}"
    );
    // Each level holds the one below it.
    assert!(get >= direct && direct > search && search >= leaf && search >= node);
    let bound = |measured: usize| measured + measured / 4;
    assert!(get <= bound(17_392), "get's future grew to {get} B");
    assert!(
        search <= bound(2_888),
        "search_in's future grew to {search} B"
    );
    assert!(leaf <= bound(1_008), "read_leaf's future grew to {leaf} B");
    assert!(
        frozen <= bound(14_176),
        "wait_frozen's future grew to {frozen} B"
    );
    assert!(help <= bound(11_864), "help_grow's future grew to {help} B");
}
