//! The hot path allocates nothing: after warm-up, lookups and in-place updates of every
//! key-value index, and the fabric verbs themselves, make no heap allocation (counted by a global
//! allocator wrapper, per thread). `ops` extends this to inserts of new keys (splitting and
//! growing nodes), deletes and range scans of every index, and Catfish's inserts and deletes.
use remora_core::GlobalAddr;
use remora_core::block_on::block_on;
use remora_core::fabric::{Endpoint, QueuePair};
use remora_core::sherman::{Sherman, ShermanConfig};
use remora_core::smart::{KeyMode, Smart, SmartConfig, Techniques};
use remora_poller::soft::{NodeConfig, SoftMemoryNode};

#[path = "common/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{check_index, count};

#[path = "no_alloc/ops.rs"]
mod ops;

fn node() -> std::sync::Arc<SoftMemoryNode> {
    SoftMemoryNode::create(NodeConfig {
        region_len: 64 << 20,
        ..NodeConfig::default()
    })
    .unwrap()
}

#[test]
fn verbs_allocate_nothing() {
    let n = node();
    let ep = n.endpoint().unwrap();
    let qp = ep.qp(0).unwrap();
    let a = GlobalAddr::new(0, 1 << 20);
    let mut buf = [0u8; 64];
    let mut run = || {
        block_on(async {
            for _ in 0..1000 {
                qp.read(a, &mut buf).await.unwrap();
                qp.write(a, &[7u8; 64]).await.unwrap();
                qp.cas(a, 0, 1).await.unwrap();
                qp.faa(a, 1).await.unwrap();
            }
        })
    };
    let _ = count(&mut run);
    assert_eq!(count(&mut run), 0, "fabric verbs allocated");
}

#[test]
fn sherman_lookups_and_updates_allocate_nothing() {
    let n = node();
    let ep = n.endpoint().unwrap();
    let t = block_on(Sherman::create(&ep, ShermanConfig::sherman())).unwrap();
    check_index(&t, "sherman");
}

#[test]
fn smart_lookups_and_updates_allocate_nothing() {
    let n = node();
    let ep = n.endpoint().unwrap();
    let cfg = SmartConfig::new(Techniques::SMART, KeyMode::Fixed(8), 8);
    let t = block_on(Smart::open(&ep, cfg)).unwrap();
    check_index(&t, "smart");
}

#[test]
fn chime_lookups_and_updates_allocate_nothing() {
    use remora_core::chime::{Chime, ChimeConfig};
    // CHIME as its authors built it, then with remora's read delegation and write
    // combining (their shared tables are preallocated per node).
    for ideas in [&[][..], &["delegation", "combining"][..]] {
        let n = node();
        let ep = n.endpoint().unwrap();
        let mut cfg = ChimeConfig::chime();
        for idea in ideas {
            assert!(cfg.turn_on(idea), "{idea}");
        }
        let t = block_on(Chime::create(&ep, cfg)).unwrap();
        check_index(&t, &format!("chime {ideas:?}"));
    }
}

#[test]
fn canrt_lookups_and_appends_allocate_nothing() {
    use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer};
    let cfg = NodeConfig {
        region_len: 32 << 20,
        chunk_size: 1 << 16,
        ..NodeConfig::default()
    };
    let n = SoftMemoryNode::create_with(cfg, Box::new(CanrtServer::new())).unwrap();
    let _srv = n.spawn_server();
    let ep = n.endpoint().unwrap();
    let t = block_on(Canrt::open(&ep, CanrtConfig::new(0))).unwrap();
    check_index(&t, "canrt");
}

#[test]
fn erda_lookups_and_updates_allocate_nothing() {
    use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer};
    let cfg = NodeConfig {
        region_len: 32 << 20,
        ..NodeConfig::default()
    };
    let n =
        SoftMemoryNode::create_with(cfg, Box::new(ErdaServer::new(ErdaConfig::small()))).unwrap();
    let _srv = n.spawn_server();
    let ep = n.endpoint().unwrap();
    let t = block_on(Erda::open(&ep, ErdaClientConfig::default())).unwrap();
    check_index(&t, "erda");
}

#[test]
fn wort_and_woart_lookups_and_updates_allocate_nothing() {
    use remora_core::wort::{Kind, Wort, WortClientConfig, WortServer};
    for kind in [Kind::Wort, Kind::Woart] {
        let cfg = NodeConfig {
            region_len: 32 << 20,
            ..NodeConfig::default()
        };
        let n = SoftMemoryNode::create_with(cfg, Box::new(WortServer::new(kind))).unwrap();
        let _srv = n.spawn_server();
        let ep = n.endpoint().unwrap();
        let t = block_on(Wort::open(&ep, WortClientConfig::default())).unwrap();
        check_index(&t, &format!("{kind:?}"));
    }
}

#[test]
fn catfish_searches_allocate_nothing() {
    use remora_core::catfish::{CatfishClient, CatfishServer, Mode, Rect};
    let cfg = NodeConfig::default();
    let max = cfg.max_msg;
    let n = SoftMemoryNode::create_with(cfg, Box::new(CatfishServer::new(max))).unwrap();
    let _srv = n.spawn_server();
    let ep = n.endpoint().unwrap();
    let qp = ep.qp(0).unwrap();
    let mut c = block_on(CatfishClient::create(qp, 1)).unwrap();
    let rect = |i: i32, w: i32| {
        Rect::new(
            i * 97 % 10_000,
            i * 31 % 10_000,
            i * 97 % 10_000 + w,
            i * 31 % 10_000 + w,
        )
        .unwrap()
    };
    block_on(async {
        for i in 0..500 {
            c.insert(qp, rect(i, 50), i as u64).await.unwrap();
        }
    });
    let mut out = Vec::with_capacity(1024);
    let mut pass = |mode: Mode| {
        count(|| {
            block_on(async {
                for i in 0..200 {
                    out.clear();
                    c.search(qp, rect(i, 400), mode, &mut out).await.unwrap();
                    assert!(!out.is_empty(), "search {i} finds its own rectangle");
                }
            })
        })
    };
    for mode in [Mode::Offload, Mode::Messaging, Mode::Adaptive] {
        let _ = pass(mode); // warm buffers
        assert_eq!(pass(mode), 0, "catfish {mode:?} searches allocated");
    }
}
