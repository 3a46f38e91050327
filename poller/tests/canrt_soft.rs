//! CANRT on the soft fabric: client threads and coroutines against a memory node whose CPU
//! runs the metadata applier (`CanrtServer`) on its own thread.
use remora_core::block_on::block_on;
use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer};
use remora_core::fabric::{Endpoint, FabricError, QueuePair, Verb};
use remora_core::index::KvIndex;
use remora_core::kvcheck::{History, client_history};
use remora_core::{GlobalAddr, Snapshot};
use remora_layouts::canrt::{Control, ControlKind, LOCK_OFF};
use remora_poller::executor::run_coroutines;
use remora_poller::soft::{NodeConfig, SoftEndpoint, SoftMemoryNode};
use std::sync::Arc;
use std::sync::atomic::Ordering;

fn node(server: CanrtServer) -> Arc<SoftMemoryNode> {
    SoftMemoryNode::create_with(
        NodeConfig {
            region_len: 32 << 20,
            chunk_size: 1 << 16,
            ..NodeConfig::default()
        },
        Box::new(server),
    )
    .unwrap()
}

fn cfg(slots: u32) -> CanrtConfig {
    CanrtConfig {
        slots,
        ..CanrtConfig::new(0)
    }
}

fn be(k: u64) -> [u8; 8] {
    k.to_be_bytes()
}

fn counters(ep: &SoftEndpoint) -> Snapshot {
    ep.qp(0).unwrap().counters().snapshot()
}

/// Threads × coroutines, each running an oracle-checked history (`remora_core::kvcheck`):
/// exact on its own key range, never a torn, invented or backwards value on hot keys; small
/// data nodes so the tree resizes many times under the load.
#[test]
fn concurrent_threads_agree_with_their_oracles() {
    const THREADS: u64 = 3;
    let server = CanrtServer::new();
    let stats = server.stats();
    let n = node(server);
    let _srv = n.spawn_server();
    std::thread::scope(|s| {
        for w in 0..THREADS {
            let n = n.clone();
            s.spawn(move || {
                let ep = n.endpoint().unwrap();
                let t = block_on(Canrt::open(&ep, cfg(8))).unwrap();
                let coros = (0..2u64)
                    .map(|c| {
                        let t = &t;
                        let h = History {
                            client: 1 + w * 2 + c,
                            ops: 800,
                            range: 150,
                            hot: 4,
                            seed: 42,
                            value_size: 8,
                            scans: true,
                        };
                        async move { client_history(t, &h).await.unwrap() }
                    })
                    .collect();
                run_coroutines(coros);
                let st = t.stats();
                println!(
                    "thread {w}: torn re-reads {}, lock waits {}, refreshes {}, resize requests {}",
                    st.torn_retries, st.lock_waits, st.refreshes, st.resize_requests
                );
            });
        }
    });
    let resizes = stats.resizes.load(Ordering::Relaxed);
    println!(
        "server: applied {}, unlocks {}, resizes {}, rejected {}",
        stats.applied.load(Ordering::Relaxed),
        stats.unlocks.load(Ordering::Relaxed),
        resizes,
        stats.rejected.load(Ordering::Relaxed)
    );
    assert!(resizes > 3, "the load never made the tree resize");
    assert_eq!(stats.rejected.load(Ordering::Relaxed), 0);
}

/// The counters: a warm lookup is one doorbell (the node READ between two READs of its
/// meta word) and one round trip; an uncontended write is one FETCH_AND_ADD + snapshot
/// doorbell and one WRITE_WITH_IMM + flush READ doorbell.
#[test]
fn warm_lookup_costs_one_doorbell_and_one_round_trip() {
    let n = node(CanrtServer::new());
    let _srv = n.spawn_server();
    let ep = n.endpoint().unwrap();
    block_on(async {
        let t = Canrt::open(&ep, cfg(32)).await.unwrap();
        const N: u64 = 2000;
        for k in 0..N {
            t.upsert(&be(k * 7919), &k.to_le_bytes()).await.unwrap();
        }
        let mut out = [0u8; 8];
        // Warm the cache (the last resize may postdate it).
        t.get(&be(0), &mut out).await.unwrap();
        let before = counters(&ep);
        for k in 0..N {
            assert_eq!(t.get(&be(k * 7919), &mut out).await.unwrap(), Some(8));
            assert_eq!(u64::from_le_bytes(out), k);
        }
        let d = counters(&ep) - before;
        let size = t.view().header.data_node_size;
        println!(
            "lookup: {:.2} verbs, {:.2} READs, {:.2} round trips, {:.0} bytes in per op (data node {size} B)",
            d.posted_verbs() as f64 / N as f64,
            d.verb(Verb::Read) as f64 / N as f64,
            d.round_trips as f64 / N as f64,
            d.bytes_in as f64 / N as f64,
        );
        // The node READ bracketed by two 8-byte READs of its meta word, one doorbell.
        assert_eq!(d.verb(Verb::Read), 3 * N);
        assert_eq!(d.posted_verbs(), 3 * N);
        assert_eq!(d.doorbells, N);
        assert_eq!(d.round_trips, N);
        // Updates in an order that visits a different data node each time (the applier
        // keeps up): 2 round trips each unless a ticket must wait for the applier.
        let before = counters(&ep);
        let waits = t.stats().lock_waits;
        let skip_requests = t.stats().skip_requests;
        let turn_waits = t.stats().turn_waits;
        for i in 0..N {
            let k = i * 997 % N;
            assert!(
                t.update(&be(k * 7919), &(k + 1).to_le_bytes())
                    .await
                    .unwrap()
            );
        }
        let d = counters(&ep) - before;
        let st = t.stats();
        println!(
            "update (spread): {:.2} verbs ({:.2} FAA, {:.2} READ, {:.2} WRITE_WITH_IMM), {:.2} round trips, \
             {:.0} bytes out per op; lock waits {}",
            d.posted_verbs() as f64 / N as f64,
            d.verb(Verb::Faa) as f64 / N as f64,
            d.verb(Verb::Read) as f64 / N as f64,
            d.verb(Verb::WriteImm) as f64 / N as f64,
            d.round_trips as f64 / N as f64,
            d.bytes_out as f64 / N as f64,
            st.lock_waits - waits
        );
        assert_eq!(d.verb(Verb::Faa), N);
        assert_eq!(d.verb(Verb::WriteImm), N);
        // Two doorbells (FETCH_AND_ADD + three snapshot READs; WRITE_WITH_IMM + meta + flush
        // READ); a wait is one 8-byte READ of the meta word per poll, then one more
        // snapshot (three READs), one round trip each.
        let polls = st.lock_waits - waits;
        let again = d.verb(Verb::Read) - 5 * N - polls;
        assert_eq!(again % 3, 0);
        // (and a `Skip` SEND whenever the applier, starved of CPU, left a ticket served
        // for a whole lease)
        let skips = st.skip_requests - skip_requests;
        // (and a `Wait` SEND per write whose ticket was not served at once)
        let asked = st.turn_waits - turn_waits;
        assert_eq!(d.round_trips, 2 * N + polls + again / 3 + skips + asked);
        // Back to back on one node: each write waits for the applier to release the last.
        let before = counters(&ep);
        let waits = t.stats().lock_waits;
        for i in 0..200u64 {
            t.upsert(&be(7919), &i.to_le_bytes()).await.unwrap();
        }
        let d = counters(&ep) - before;
        println!(
            "upsert (same node back to back): {:.2} verbs, {:.2} round trips per op; {:.1} meta-word polls per op",
            d.posted_verbs() as f64 / 200.0,
            d.round_trips as f64 / 200.0,
            (t.stats().lock_waits - waits) as f64 / 200.0
        );
        for k in 2..N {
            assert_eq!(t.get(&be(k * 7919), &mut out).await.unwrap(), Some(8));
            assert_eq!(u64::from_le_bytes(out), k + 1);
        }
        assert_eq!(t.get(&be(7919), &mut out).await.unwrap(), Some(8));
        assert_eq!(u64::from_le_bytes(out), 199);
    });
}

/// Readers of one data node while writers keep appending to it and the applier keeps
/// releasing: every value read is one a writer wrote, never backwards per writer, and
/// READs that straddled a release are re-read (counted), never returned.
#[test]
fn torn_node_reads_are_retried_never_returned() {
    let n = node(CanrtServer::new());
    let _srv = n.spawn_server();
    {
        let ep = n.endpoint().unwrap();
        let t = block_on(Canrt::open(&ep, cfg(32))).unwrap();
        for k in 0..8u64 {
            block_on(t.upsert(&be(k), &0u64.to_le_bytes())).unwrap();
        }
    }
    const ROUNDS: u64 = 500;
    let torn = std::thread::scope(|s| {
        for w in 0..2u64 {
            let n = n.clone();
            s.spawn(move || {
                let ep = n.endpoint().unwrap();
                let t = block_on(Canrt::open(&ep, cfg(32))).unwrap();
                for i in 1..=ROUNDS {
                    let v = (w + 1) << 32 | i;
                    block_on(t.upsert(&be(i % 8), &v.to_le_bytes())).unwrap();
                }
            });
        }
        let r = s.spawn(|| {
            let ep = n.endpoint().unwrap();
            let t = block_on(Canrt::open(&ep, cfg(32))).unwrap();
            let mut last = [[0u64; 3]; 8];
            let mut out = [0u8; 8];
            for i in 0..4 * ROUNDS {
                let k = i % 8;
                assert_eq!(block_on(t.get(&be(k), &mut out)).unwrap(), Some(8));
                let v = u64::from_le_bytes(out);
                let (w, seq) = ((v >> 32) as usize, v & 0xFFFF_FFFF);
                assert!(w <= 2 && seq <= ROUNDS, "invented value {v:#x}");
                assert!(
                    seq >= last[k as usize][w],
                    "key {k}: writer {w} went backwards"
                );
                last[k as usize][w] = seq;
            }
            t.stats().torn_retries
        });
        r.join().unwrap()
    });
    println!("reader re-read {torn} torn data-node READs");
}

/// A client that took a lock ticket and died: the next writer to that node waits about a
/// lease, then the server skips the dead ticket (it used to be a `LockTimeout` for good);
/// lookups are not blocked meanwhile. A malformed message drops only its connection.
#[test]
fn a_dead_lock_holder_costs_a_lease_and_bad_messages_are_refused() {
    let server = CanrtServer::new();
    let stats = server.stats();
    let n = node(server);
    let _srv = n.spawn_server();
    let ep = n.endpoint().unwrap();
    block_on(async {
        let t = Canrt::open(&ep, cfg(8)).await.unwrap();
        t.upsert(&be(1), &1u64.to_le_bytes()).await.unwrap();
        let v = t.view();
        let id = v.locate(1).unwrap();
        let lock = GlobalAddr::new(0, v.header.data_node_off(id) + LOCK_OFF);
        // A dead client's ticket (never written, never unlocked).
        let dead = n.endpoint().unwrap();
        let qp = dead.qp(0).unwrap();
        // Wait until our own upsert is applied, so the dead ticket is the holder's.
        let mut out = [0u8; 8];
        loop {
            let mut w = [0u8; 8];
            qp.read(lock, &mut w).await.unwrap();
            let mut m = [0u8; 8];
            qp.read(lock.add(8), &mut m).await.unwrap();
            if u64::from_le_bytes(w) & 0xFFFF == (u64::from_le_bytes(m) >> 32) & 0xFFFF {
                break;
            }
        }
        qp.faa(lock, 1).await.unwrap();
        assert_eq!(t.get(&be(1), &mut out).await.unwrap(), Some(8));
        assert_eq!(u64::from_le_bytes(out), 1);
        let start = std::time::Instant::now();
        t.upsert(&be(1), &2u64.to_le_bytes()).await.unwrap();
        let waited = start.elapsed();
        assert!(
            waited >= std::time::Duration::from_nanos(t_lease()),
            "{waited:?}"
        );
        assert!(stats.skipped.load(Ordering::Relaxed) >= 1);
        assert!(t.stats().skip_requests >= 1);
        assert_eq!(t.get(&be(1), &mut out).await.unwrap(), Some(8));
        assert_eq!(u64::from_le_bytes(out), 2);
        // An unlock by a client that does not hold the lock is refused: that connection
        // drops, the node serves on.
        let forged = Control::new(
            ControlKind::Unlock,
            v.epoch_tag(),
            v.header.array_gen,
            id,
            12345,
        );
        qp.send(&forged.encode()).await.unwrap();
        // The node may already have dropped this connection for the forged unlock (its
        // farewell closes the rings at once): the garbage then never leaves, which is the
        // same outcome. Any other error is a bug.
        match qp.send(b"garbage").await {
            Ok(())
            | Err(FabricError::RetryExceeded { .. })
            | Err(FabricError::RemoteInvalid { .. })
            | Err(FabricError::Flushed) => {}
            Err(e) => panic!("sending on a refused connection: {e:?}"),
        }
        let other = n.endpoint().unwrap();
        let t2 = Canrt::open(&other, cfg(8)).await.unwrap();
        assert_eq!(t2.get(&be(1), &mut out).await.unwrap(), Some(8));
    });
}

fn t_lease() -> u64 {
    CanrtConfig::new(0).lease.lease_ns
}

/// Two threads insert ascending keys (each insert lands in the rightmost data node of its
/// range, so the tree splits every few inserts) while a third looks keys up: nothing is
/// lost across hundreds of resizes, and every key written is found in order by a scan.
#[test]
fn ascending_writers_through_many_splits() {
    const N: u64 = 400;
    let server = CanrtServer::new();
    let stats = server.stats();
    let n = node(server);
    let _srv = n.spawn_server();
    std::thread::scope(|s| {
        for w in 1..=2u64 {
            let n = n.clone();
            s.spawn(move || {
                let ep = n.endpoint().unwrap();
                let t = block_on(Canrt::open(&ep, cfg(8))).unwrap();
                for i in 0..N {
                    block_on(t.upsert(&be(w << 32 | i), &i.to_le_bytes())).unwrap();
                }
            });
        }
        let n = n.clone();
        s.spawn(move || {
            let ep = n.endpoint().unwrap();
            let t = block_on(Canrt::open(&ep, cfg(8))).unwrap();
            let mut out = [0u8; 8];
            for i in 0..4 * N {
                if let Some(len) = block_on(t.get(&be((1 << 32) | (i % N)), &mut out)).unwrap() {
                    assert_eq!(len, 8);
                    assert_eq!(u64::from_le_bytes(out), i % N);
                }
            }
        });
    });
    let ep = n.endpoint().unwrap();
    let t = block_on(Canrt::open(&ep, cfg(8))).unwrap();
    let mut got = Vec::new();
    block_on(t.scan(&be(0), usize::MAX, &mut |k, v| {
        got.push((
            u64::from_be_bytes(k.try_into().unwrap()),
            u64::from_le_bytes(v.try_into().unwrap()),
        ))
    }))
    .unwrap();
    let want: Vec<(u64, u64)> = (1..=2u64)
        .flat_map(|w| (0..N).map(move |i| (w << 32 | i, i)))
        .collect();
    assert_eq!(got, want);
    let resizes = stats.resizes.load(Ordering::Relaxed);
    println!("ascending writers: {resizes} resizes");
    assert!(resizes > 50);
}
