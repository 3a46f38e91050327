//! The runtime over the verbs fabric's data path, on the fake device (no NIC needed): the
//! poller runs a `FakeEndpoint` (verbs queue pairs, work-request chains, completion
//! dispatch) against a memory node in its own thread.
use super::*;

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

/// The fake device's node lives in its poller's thread: a second poller is refused.
#[test]
fn the_fake_device_takes_one_poller() {
    let e = ComputeNode::builder()
        .memory(Memory::VerbsFake {
            config: NodeConfig::default(),
            service: Service::None,
        })
        .pollers(2)
        .start()
        .err()
        .unwrap();
    assert!(matches!(e, Error::Config(_)), "{e}");
}
