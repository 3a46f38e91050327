//! Pollers reconnecting after a lost connection (see `lives.rs`), on the soft fabric: a
//! revoked region key (the node stays up, its data too) and a memory node that goes away
//! and comes back.
use super::*;
use std::time::{Duration, Instant};

fn rect(i: u64) -> Rect {
    let i = i as i32;
    Rect {
        min_x: i * 10,
        min_y: 0,
        max_x: i * 10 + 5,
        max_y: 5,
    }
}

const ALL: Rect = Rect {
    min_x: 0,
    min_y: 0,
    max_x: 1 << 20,
    max_y: 10,
};

fn ptrs(hits: Vec<Entry>) -> Vec<u64> {
    let mut v: Vec<u64> = hits.iter().map(|e| e.ptr).collect();
    v.sort_unstable();
    v
}

/// The region key is revoked under two pollers: each one's next offloaded search fails
/// (its queue pair is broken), then the handle carries on over new connections with the
/// tree intact.
#[test]
fn catfish_carries_on_after_its_region_key_is_revoked() {
    let n = ComputeNode::builder()
        .in_process(NodeConfig::default(), Service::Catfish)
        .pollers(2)
        .queue_depth(4)
        .idle_spins(1000)
        .start()
        .unwrap();
    let cfg = CatfishConfig::default().with_search(SearchMode::Offload);
    let tree = n.open_spatial(SpatialConfig::Catfish(cfg)).unwrap();
    for i in 0..100 {
        tree.insert(rect(i), i).wait().unwrap();
    }
    assert_eq!(ptrs(tree.search(ALL, 1000).wait().unwrap()).len(), 100);
    n.memory_node().unwrap().revoke_key();
    let mut lost = 0;
    let mut ok = 0;
    for _ in 0..20 {
        match tree.search(ALL, 1000).wait() {
            Ok(hits) => {
                assert_eq!(ptrs(hits), (0..100).collect::<Vec<_>>());
                ok += 1;
            }
            Err(e) => {
                assert!(e.is_connection_lost(), "{e}");
                lost += 1;
            }
        }
    }
    assert!(
        (1..=2).contains(&lost),
        "one lost search per poller at most: {lost}"
    );
    assert_eq!(ok + lost, 20);
    tree.insert(rect(100), 100).wait().unwrap();
    assert_eq!(ptrs(tree.search(ALL, 1000).wait().unwrap()).len(), 101);
}

/// A memory node with the `catfish` service, served and listening on `path`.
fn memnode(path: &std::path::Path) -> (Arc<SoftMemoryNode>, ServerHandle, control::Listener) {
    let cfg = NodeConfig::default();
    let h = Service::Catfish
        .handler(cfg.region_len, cfg.chunk_size, cfg.max_msg)
        .unwrap()
        .unwrap();
    let node = SoftMemoryNode::create_with(cfg, h).unwrap();
    let server = node.spawn_server();
    let listener = control::listen(&node, path).unwrap();
    (node, server, listener)
}

/// The memory node goes away between operations: the operation that finds out fails (no
/// hang), the next one fails with `Error::Reconnect` after bounded retries while the node
/// is down, and once a node is back on the same socket the handle carries on there (a fresh
/// DRAM node: the tree is created anew, empty).
#[test]
fn catfish_reconnects_when_its_memory_node_comes_back() {
    let dir = std::env::temp_dir().join(format!("remora-reconnect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("memnode.sock");
    let first = memnode(&path);
    let n = ComputeNode::builder()
        .memnode(&path)
        .queue_depth(4)
        .idle_spins(1000)
        .start()
        .unwrap();
    let cfg = CatfishConfig::default().with_search(SearchMode::Messaging);
    let tree = n.open_spatial(SpatialConfig::Catfish(cfg)).unwrap();
    for i in 0..50 {
        tree.insert(rect(i), i).wait().unwrap();
    }
    assert_eq!(ptrs(tree.search(ALL, 1000).wait().unwrap()).len(), 50);
    drop(first);

    let t = Instant::now();
    let e = tree.insert(rect(50), 50).wait().unwrap_err();
    assert!(e.is_connection_lost(), "{e}");
    let found = t.elapsed();
    let t = Instant::now();
    let e = tree.search(ALL, 1000).wait().unwrap_err();
    let down = t.elapsed();
    assert!(
        matches!(
            e,
            Error::Reconnect {
                tries: lives::RECONNECT_TRIES,
                ..
            }
        ),
        "{e}"
    );
    assert!(found < Duration::from_secs(10) && down < Duration::from_secs(10));
    eprintln!("lost found in {found:?}; reconnects gave up in {down:?}: {e}");

    let _second = memnode(&path);
    tree.insert(rect(7), 7).wait().unwrap();
    tree.insert(rect(8), 8).wait().unwrap();
    assert_eq!(ptrs(tree.search(ALL, 1000).wait().unwrap()), [7, 8]);
    drop(n);
    let _ = std::fs::remove_dir_all(&dir);
}
