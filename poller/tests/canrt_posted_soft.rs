//! CANRT's paper-semantics write (`WriteAck::Posted`) on the soft fabric: posted appends are
//! flow-controlled by the server's credits (`core/src/canrt/credit.rs`), so writers with a
//! small window against a memory node of few receives per connection never break their
//! queue pairs, through many resizes and a writer that vanishes mid-window; the server
//! applies every item.
use remora_core::block_on::block_on;
use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer, WriteAck};
use remora_core::index::KvIndex;
use remora_poller::executor::run_coroutines;
use remora_poller::soft::{NodeConfig, SoftMemoryNode};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const THREADS: u64 = 3;
const KEYS: u64 = 300;

fn cfg() -> CanrtConfig {
    CanrtConfig {
        slots: 8,
        ack: WriteAck::Posted,
        posted_window: 4,
        ..CanrtConfig::new(0)
    }
}

fn key(thread: u64, k: u64) -> [u8; 8] {
    // Spread over the key space: each thread's writes go to many data nodes.
    ((k * 0x9E37_79B9 % 997) << 48 | thread << 32 | k).to_be_bytes()
}

#[test]
fn posted_writers_on_few_receives_keep_their_queue_pairs_and_lose_nothing() {
    let server = CanrtServer::new();
    let stats = server.stats();
    let n = SoftMemoryNode::create_with(
        NodeConfig {
            region_len: 32 << 20,
            chunk_size: 1 << 16,
            ring_depth: 8,
            ..NodeConfig::default()
        },
        Box::new(server),
    )
    .unwrap();
    let _srv = n.spawn_server();
    // A writer that posts a burst and vanishes (its connection dropped with appends in
    // flight): the others go on.
    {
        let ep = n.endpoint().unwrap();
        let t = block_on(Canrt::open(&ep, cfg())).unwrap();
        for k in 0..KEYS / 4 {
            block_on(t.upsert(&key(9, k), &k.to_le_bytes())).unwrap();
        }
    }
    std::thread::scope(|s| {
        for w in 0..THREADS {
            let n = n.clone();
            s.spawn(move || {
                let ep = n.endpoint().unwrap();
                let t = block_on(Canrt::open(&ep, cfg())).unwrap();
                let coros = (0..2u64)
                    .map(|c| {
                        let t = &t;
                        async move {
                            for k in (c..KEYS).step_by(2) {
                                t.upsert(&key(w, k), &k.to_le_bytes()).await.unwrap();
                            }
                        }
                    })
                    .collect();
                run_coroutines(coros);
            });
        }
    });
    // Every posted item is applied (later: poll until all are seen, or give up).
    let ep = n.endpoint().unwrap();
    let t = block_on(Canrt::open(&ep, CanrtConfig::new(0))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let missing = loop {
        let mut missing = 0;
        let mut v = [0u8; 8];
        for w in 0..THREADS {
            for k in 0..KEYS {
                let got = block_on(t.get(&key(w, k), &mut v)).unwrap();
                if got.is_none() || u64::from_le_bytes(v) != k {
                    missing += 1;
                }
            }
        }
        if missing == 0 || Instant::now() > deadline {
            break missing;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let resizes = stats.resizes.load(Ordering::Relaxed);
    println!(
        "server: applied {}, resizes {resizes}, rejected {}; missing {missing}",
        stats.applied.load(Ordering::Relaxed),
        stats.rejected.load(Ordering::Relaxed)
    );
    assert!(resizes > 3, "the load never made the tree resize");
    assert_eq!(missing, 0);
}
