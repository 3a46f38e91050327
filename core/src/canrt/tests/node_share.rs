//! Handles of one compute node share its prefix cache ([`CanrtNode`]): one copy of the
//! prefix array, and one thread's reload after a resize serves the others.
use super::*;
use std::sync::Arc;

#[test]
fn handles_of_one_node_share_one_prefix_array_and_its_reloads() {
    let node = MemNode::new(Pm::new(8 << 20, 1 << 16));
    let (ep1, ep2) = (mem_ep(&node), mem_ep(&node));
    block_on(async {
        let shared = Arc::new(CanrtNode::new());
        let t1 = Canrt::open_on(&ep1, cfg(8), shared.clone()).await.unwrap();
        let t2 = Canrt::open_on(&ep2, cfg(8), shared.clone()).await.unwrap();
        assert!(Arc::ptr_eq(&t1.view(), &t2.view()), "two prefix arrays");
        let before = t2.view().header.epoch;
        for k in 0..2000u64 {
            t1.upsert(&be(k << 20), &k.to_le_bytes()).await.unwrap();
        }
        assert!(
            t1.stats().refreshes > 0,
            "the inserts never resized the tree"
        );
        let mut out = [0u8; 8];
        for k in (0..2000u64).step_by(37) {
            assert_eq!(t2.get(&be(k << 20), &mut out).await.unwrap(), Some(8));
            assert_eq!(u64::from_le_bytes(out), k);
        }
        assert!(t2.view().header.epoch > before);
        // t2 moved to the newer tree without loading a prefix array itself.
        assert_eq!(t2.stats().refreshes, 0);
        assert!(Arc::ptr_eq(&t1.view(), &t2.view()), "two prefix arrays");
        assert_eq!(
            shared.prefix_bytes(),
            t1.view().prefix_bytes().len(),
            "the node holds the current array"
        );
    });
}
