//! Erda's hopscotch displacement on the soft fabric (real threads, real tearing between
//! 8-byte words): a small table filled far past the load where "first free bucket of the
//! neighborhood" fails, every key still found, updated and deleted; and concurrent one-sided
//! readers that never miss a key while the server moves entries under them.
use remora_core::NodeId;
use remora_core::block_on::block_on;
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaError, ErdaServer};
use remora_core::fabric::{FabricError, Recv, SegmentOrder};
use remora_core::index::KvIndex;
use remora_core::server::{Handler, LocalRegion, Replies};
use remora_layouts::erda::{Status, Superblock};
use remora_poller::soft::{NodeConfig, SoftEndpoint, SoftMemoryNode};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// 512 home buckets, neighborhoods of 8, one head.
const HOMES: u64 = 512;

/// The node's region with a slow persist (NVM flush and fence), which widens every window
/// between the steps of a move so that concurrent readers land inside them.
struct SlowPersist<'a> {
    inner: &'a dyn LocalRegion,
    delay: Duration,
}

impl LocalRegion for SlowPersist<'_> {
    fn node(&self) -> NodeId {
        self.inner.node()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        self.inner.write(offset, data)
    }
    fn load_u64(&self, offset: u64) -> Result<u64, FabricError> {
        self.inner.load_u64(offset)
    }
    fn store_u64(&self, offset: u64, value: u64) -> Result<(), FabricError> {
        self.inner.store_u64(offset, value)
    }
    fn cas_u64(&self, offset: u64, current: u64, new: u64) -> Result<u64, FabricError> {
        self.inner.cas_u64(offset, current, new)
    }
    fn persist(&self, offset: u64, len: usize) {
        self.inner.persist(offset, len);
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
    }
}

/// The Erda server behind a slow persist, publishing how many entries it moved.
struct Server {
    erda: ErdaServer,
    delay: Duration,
    displaced: Arc<AtomicU64>,
}

impl Handler for Server {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        let slow = SlowPersist {
            inner: region,
            delay: self.delay,
        };
        let r = self.erda.on_message(&slow, conn, recv, msg, replies);
        self.displaced
            .store(self.erda.stats().displaced, Ordering::Release);
        r
    }
}

/// A node running the server; returns it and the server's count of moved entries.
fn node(delay: Duration) -> (Arc<SoftMemoryNode>, Arc<AtomicU64>) {
    let displaced = Arc::new(AtomicU64::new(0));
    let server = Server {
        erda: ErdaServer::new(ErdaConfig {
            heads: 1,
            buckets: HOMES,
            neighborhood: 8,
            ..ErdaConfig::small()
        }),
        delay,
        displaced: displaced.clone(),
    };
    let n = SoftMemoryNode::create_with(
        NodeConfig {
            region_len: 16 << 20,
            // Readers' READs sample their 64-byte segments in random order (the default,
            // said explicitly: displacement must not rely on ascending order).
            segment_order: SegmentOrder::Shuffled,
            ..NodeConfig::default()
        },
        Box::new(server),
    )
    .unwrap();
    (n, displaced)
}

fn k(x: u64) -> [u8; 8] {
    x.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes()
}

async fn get(e: &Erda<'_, SoftEndpoint>, key: u64) -> Option<u64> {
    let mut out = [0u8; 8];
    e.get(&k(key), &mut out)
        .await
        .unwrap()
        .map(|_| u64::from_le_bytes(out))
}

/// The table a server without displacement would build: returns how many of `keys` (in
/// order) it places before the first one whose neighborhood is full.
fn first_free_capacity(sb: &Superblock, keys: impl Iterator<Item = u64>) -> usize {
    let mut used = vec![false; sb.buckets as usize];
    for (n, x) in keys.enumerate() {
        let home = sb.home(&k(x)) as usize;
        match (home..home + sb.neighborhood as usize).find(|&i| !used[i]) {
            Some(i) => used[i] = true,
            None => return n,
        }
    }
    usize::MAX
}

#[test]
fn a_full_neighborhood_displaces_instead_of_refusing() {
    let (n, displaced) = node(Duration::ZERO);
    let _srv = n.spawn_server();
    let ep = n.endpoint().unwrap();
    block_on(async {
        let e = Erda::open(&ep, ErdaClientConfig::default()).await.unwrap();
        let sb = e.superblock();
        let mut inserted = 0u64;
        loop {
            match e.upsert(&k(inserted), &inserted.to_le_bytes()).await {
                Ok(()) => inserted += 1,
                Err(ErdaError::Refused {
                    status: Status::TableFull,
                }) => break,
                Err(err) => panic!("insert {inserted}: {err}"),
            }
            assert!(inserted <= sb.buckets, "more keys than buckets");
        }
        let first_free = first_free_capacity(&sb, 0..inserted + 1);
        let load = inserted as f64 / sb.buckets as f64;
        println!(
            "erda hopscotch: {inserted} keys in {} buckets (load {load:.3}) before TableFull; \
             first-free would refuse key {first_free} (load {:.3})",
            sb.buckets,
            first_free as f64 / sb.buckets as f64
        );
        assert!(
            (first_free as u64) < inserted,
            "first-free would not have failed: displacement never exercised"
        );
        assert!(load >= 0.8, "hopscotch reached only load {load:.3}");
        let moved = displaced.load(Ordering::Acquire);
        println!("erda hopscotch: {moved} entries moved");
        assert!(moved > 0);
        for x in 0..inserted {
            assert_eq!(get(&e, x).await, Some(x), "key {x} after the fill");
        }
        // Moved entries keep working: update every key, delete a third, re-insert them.
        for x in 0..inserted {
            assert!(
                e.update(&k(x), &(x + 1_000_000).to_le_bytes())
                    .await
                    .unwrap()
            );
        }
        for x in (0..inserted).step_by(3) {
            assert!(e.delete(&k(x)).await.unwrap());
        }
        for x in 0..inserted {
            let want = (x % 3 != 0).then_some(x + 1_000_000);
            assert_eq!(get(&e, x).await, want, "key {x} after update/delete");
        }
        for x in (0..inserted).step_by(3) {
            e.upsert(&k(x), &(x + 2_000_000).to_le_bytes())
                .await
                .unwrap();
        }
        for x in 0..inserted {
            let want = if x % 3 == 0 {
                x + 2_000_000
            } else {
                x + 1_000_000
            };
            assert_eq!(get(&e, x).await, Some(want), "key {x} at the end");
        }
    });
}

#[test]
fn concurrent_readers_never_miss_a_key_being_moved() {
    // 20 µs per persist: each move (four persists) stays half-done long enough for the
    // readers' READs to land inside it.
    let (n, displaced) = node(Duration::from_micros(20));
    let _srv = n.spawn_server();
    // Keys 0..published are inserted and acknowledged; their values are their numbers.
    let published = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let gets = AtomicUsize::new(0);
    let start = Barrier::new(4);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let ep = n.endpoint().unwrap();
            let e = block_on(Erda::open(&ep, ErdaClientConfig::default())).unwrap();
            let sb = e.superblock();
            // Far past where first-free fails, short of where displacement gives up.
            let first_free = first_free_capacity(&sb, 0..sb.buckets) as u64;
            let goal = (sb.buckets * 83 / 100).max(first_free + 40);
            start.wait();
            for x in 0..goal {
                let r = block_on(e.upsert(&k(x), &x.to_le_bytes()));
                if let Err(err) = r {
                    done.store(true, Ordering::Release);
                    panic!("insert {x}: {err}");
                }
                published.store(x + 1, Ordering::Release);
            }
            done.store(true, Ordering::Release);
            (first_free, goal)
        });
        for t in 0..3u64 {
            let (n, published, done, gets, start) = (&n, &published, &done, &gets, &start);
            s.spawn(move || {
                let ep = n.endpoint().unwrap();
                let e = block_on(Erda::open(&ep, ErdaClientConfig::default())).unwrap();
                let mut rng = 0x2545_F491_4F6C_DD1Du64 ^ (t + 1);
                let sb = e.superblock();
                let homes: Vec<u64> = (0..sb.buckets).map(|x| sb.home(&k(x))).collect();
                let mut near = Vec::new();
                start.wait();
                while !done.load(Ordering::Acquire) {
                    let p = published.load(Ordering::Acquire);
                    if p == 0 {
                        std::thread::yield_now();
                        continue;
                    }
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    // Half the reads on keys near the home of the key being inserted: the
                    // ones its displacement moves.
                    let x = if rng & 1 == 0 {
                        rng % p
                    } else {
                        let h = homes[p as usize];
                        near.clear();
                        near.extend((0..p).filter(|&x| {
                            let d = homes[x as usize];
                            d + 8 >= h && d < h + 32
                        }));
                        if near.is_empty() {
                            continue;
                        }
                        near[(rng >> 8) as usize % near.len()]
                    };
                    assert_eq!(block_on(get(&e, x)), Some(x), "reader {t} missed key {x}");
                    gets.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let (first_free, goal) = writer.join().unwrap();
        let moved = displaced.load(Ordering::Acquire);
        println!(
            "erda hopscotch: {goal} keys inserted (first-free fails at {first_free}), \
             {moved} entries moved, under {} concurrent gets",
            gets.load(Ordering::Relaxed)
        );
        assert!(
            first_free < goal && moved > 0,
            "displacement never exercised"
        );
    });
    assert!(gets.load(Ordering::Relaxed) > 1000, "readers barely ran");
}
