//! The runtime over the verbs fabric's data path, on the fake device (no NIC needed): the
//! poller runs a `FakeEndpoint` (verbs queue pairs, work-request chains, completion
//! dispatch) against a memory node in its own thread.
use super::*;
use std::sync::atomic::Ordering;

fn fake_node(service: Service) -> ComputeNode {
    ComputeNode::builder()
        .memory(Memory::VerbsFake {
            config: NodeConfig {
                region_len: 64 << 20,
                ..NodeConfig::default()
            },
            service,
        })
        .queue_depth(8)
        .idle_spins(1000)
        .start()
        .expect("starting a compute node on the fake verbs device")
}

/// SMART and Sherman from two application threads, through a poller on verbs queue pairs.
#[test]
fn kv_indexes_run_over_the_fake_verbs_device() {
    let n = fake_node(Service::None);
    assert_eq!(n.service(), "echo");
    let smart = n.open(IndexConfig::smart(16)).unwrap();
    let sherman = n.open(IndexConfig::sherman()).unwrap();
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (smart, sherman) = (smart.clone(), sherman.clone());
            s.spawn(move || {
                for i in 0..200u64 {
                    let k = format!("t{t}-{i:04}");
                    smart.upsert(k.as_bytes(), &i.to_le_bytes()).wait().unwrap();
                    let key = (t * 1000 + i + 1).to_be_bytes();
                    sherman.upsert(&key, &i.to_le_bytes()).wait().unwrap();
                }
            });
        }
    });
    assert_eq!(
        smart.get(b"t1-0042").wait().unwrap(),
        Some(42u64.to_le_bytes().to_vec())
    );
    let keys: Vec<_> = sherman
        .scan(&1u64.to_be_bytes(), Some(&11u64.to_be_bytes()), 100)
        .map(|r| u64::from_be_bytes(r.unwrap().0.try_into().unwrap()))
        .collect();
    assert_eq!(keys, (1..11).collect::<Vec<_>>());
}

/// Catfish's messaging (SEND to the fake node's server, replies in the posted receives) and
/// offloaded searches, through the runtime on verbs queue pairs.
#[test]
fn catfish_runs_over_the_fake_verbs_device() {
    let n = fake_node(Service::Catfish);
    assert_eq!(n.service(), "catfish");
    let tree = n.open_spatial(SpatialConfig::catfish()).unwrap();
    let r = |i: i32| Rect {
        min_x: i * 10,
        min_y: 0,
        max_x: i * 10 + 5,
        max_y: 5,
    };
    for i in 0..300 {
        tree.insert(r(i), i as u64).wait().unwrap();
    }
    let window = Rect {
        min_x: 100,
        min_y: 0,
        max_x: 149,
        max_y: 10,
    };
    let mut got: Vec<u64> = tree
        .search(window, 100)
        .wait()
        .unwrap()
        .iter()
        .map(|e| e.ptr)
        .collect();
    got.sort_unstable();
    assert_eq!(got, [10, 11, 12, 13, 14]);
}

/// A compute node of `pollers` pollers on one fake verbs memory node.
fn shared_fake(service: Service, pollers: usize) -> ComputeNode {
    ComputeNode::builder()
        .memory(Memory::VerbsFake {
            config: NodeConfig {
                region_len: 64 << 20,
                ..NodeConfig::default()
            },
            service,
        })
        .pollers(pollers)
        .queue_depth(8)
        .idle_spins(1000)
        .start()
        .expect("starting a compute node on the fake verbs device")
}

/// Operations each poller of `n` has finished (every poller must have run some).
fn per_poller(n: &ComputeNode) -> Vec<u64> {
    n.inner
        .pollers
        .iter()
        .map(|p| p.completed.load(Ordering::Relaxed))
        .collect()
}

/// Four application threads over three pollers, each poller with its own queue pair (and
/// client id) to one fake memory node: SMART and Sherman on disjoint keys and on 8 hot keys
/// every thread overwrites, then every key read back and Sherman's order checked.
#[test]
fn kv_indexes_share_one_fake_memory_node_across_pollers() {
    let n = shared_fake(Service::None, 3);
    let smart = n.open(IndexConfig::smart(16)).unwrap();
    let sherman = n.open(IndexConfig::sherman()).unwrap();
    let threads = 4u64;
    let per = 300u64;
    std::thread::scope(|s| {
        for t in 0..threads {
            let (smart, sherman) = (smart.clone(), sherman.clone());
            s.spawn(move || {
                for i in 0..per {
                    let v = (t * 100_000 + i).to_le_bytes();
                    smart
                        .upsert(format!("k{t}-{i:04}").as_bytes(), &v)
                        .wait()
                        .unwrap();
                    sherman
                        .upsert(&(t * per + i + 1).to_be_bytes(), &v)
                        .wait()
                        .unwrap();
                    let hot = (i % 8) + 1_000_000;
                    smart
                        .upsert(format!("hot{}", i % 8).as_bytes(), &v)
                        .wait()
                        .unwrap();
                    sherman.upsert(&hot.to_be_bytes(), &v).wait().unwrap();
                }
            });
        }
    });
    let done = per_poller(&n);
    assert!(done.iter().all(|&c| c > 0), "every poller ran: {done:?}");
    for t in 0..threads {
        for i in 0..per {
            let v = (t * 100_000 + i).to_le_bytes().to_vec();
            let k = format!("k{t}-{i:04}");
            assert_eq!(
                smart.get(k.as_bytes()).wait().unwrap(),
                Some(v.clone()),
                "{k}"
            );
            let k = (t * per + i + 1).to_be_bytes();
            assert_eq!(sherman.get(&k).wait().unwrap(), Some(v), "sherman {t}/{i}");
        }
    }
    // Each hot key holds a value some thread wrote to it last in its own order.
    for h in 0..8u64 {
        for got in [
            smart.get(format!("hot{h}").as_bytes()).wait().unwrap(),
            sherman.get(&(h + 1_000_000).to_be_bytes()).wait().unwrap(),
        ] {
            let v = u64::from_le_bytes(got.unwrap().try_into().unwrap());
            assert!(v % 100_000 % 8 == h && v / 100_000 < threads, "hot{h}: {v}");
        }
    }
    let keys: Vec<u64> = sherman
        .scan(
            &1u64.to_be_bytes(),
            Some(&(threads * per + 1).to_be_bytes()),
            10_000,
        )
        .map(|r| u64::from_be_bytes(r.unwrap().0.try_into().unwrap()))
        .collect();
    assert_eq!(keys, (1..=threads * per).collect::<Vec<_>>());
}

/// Catfish from four threads over three pollers, each poller its own Catfish client (its
/// own queue pair and connection on the fake node's server): inserts, deletes and searches
/// by messaging and offloaded, all agreeing.
#[test]
fn catfish_shares_one_fake_memory_node_across_pollers() {
    let n = shared_fake(Service::Catfish, 3);
    let tree = n.open_spatial(SpatialConfig::catfish()).unwrap();
    let r = |i: u64| {
        let i = i as i32;
        Rect {
            min_x: i * 10,
            min_y: 0,
            max_x: i * 10 + 5,
            max_y: 5,
        }
    };
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let tree = tree.clone();
            s.spawn(move || {
                for i in (t..400).step_by(4) {
                    tree.insert(r(i), i).wait().unwrap();
                }
                // Every thread deletes its odd entries.
                for i in (t..400).step_by(4).filter(|i| i % 2 == 1) {
                    assert!(tree.delete(r(i), i).wait().unwrap(), "delete {i}");
                }
            });
        }
    });
    let done = per_poller(&n);
    assert!(done.iter().all(|&c| c > 0), "every poller ran: {done:?}");
    let mut got: Vec<u64> = tree
        .search(
            Rect {
                min_x: 0,
                min_y: 0,
                max_x: 4000,
                max_y: 10,
            },
            1000,
        )
        .wait()
        .unwrap()
        .iter()
        .map(|e| e.ptr)
        .collect();
    got.sort_unstable();
    assert_eq!(got, (0..400).step_by(2).collect::<Vec<_>>());
    // Windows searched from several threads at once, on every poller.
    std::thread::scope(|s| {
        for t in 0..3i32 {
            let tree = tree.clone();
            s.spawn(move || {
                for w in 0..40i32 {
                    let lo = (t * 40 + w) * 10;
                    let window = Rect {
                        min_x: lo,
                        min_y: 0,
                        max_x: lo + 19,
                        max_y: 10,
                    };
                    let mut hits: Vec<u64> = tree
                        .search(window, 10)
                        .wait()
                        .unwrap()
                        .iter()
                        .map(|e| e.ptr)
                        .collect();
                    hits.sort_unstable();
                    let want: Vec<u64> = (lo / 10..=lo / 10 + 1)
                        .map(|i| i as u64)
                        .filter(|i| i % 2 == 0)
                        .collect();
                    assert_eq!(hits, want, "window at {lo}");
                }
            });
        }
    });
}

/// Two endpoints on one shared fake node: distinct client ids (as the node's service numbers
/// their connections), and one memory (a WRITE through one is READ through the other).
#[test]
fn shared_fake_endpoints_are_distinct_clients_of_one_memory() {
    use remora_core::fabric::{Endpoint, QueuePair};
    use remora_layouts::GlobalAddr;
    let fake = verbs::SharedFake::new(&NodeConfig::default(), &Service::None).unwrap();
    let (a, b) = {
        let _g = fake.gate().enter();
        (fake.endpoint().unwrap(), fake.endpoint().unwrap())
    };
    assert_eq!((a.client_id(), b.client_id()), (1, 2));
    let _g = fake.gate().enter();
    let at = GlobalAddr::new(0, 8192);
    remora_core::block_on::block_on(a.qp(0).unwrap().write(at, &[7u8; 16])).unwrap();
    let mut img = [0u8; 16];
    remora_core::block_on::block_on(b.qp(0).unwrap().read(at, &mut img)).unwrap();
    assert_eq!(img, [7u8; 16]);
    drop((a, b));
}
