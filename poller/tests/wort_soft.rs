//! WORT and WOART on the soft fabric (real threads, a real server thread polling the rings):
//! one client against a BTreeMap, then concurrent clients with oracle-checked histories.
use remora_core::block_on::block_on;
use remora_core::index::KvIndex;
use remora_core::wort::{Kind, Wort, WortClientConfig, WortServer};
use remora_poller::soft::{NodeConfig, SoftMemoryNode};
use std::collections::BTreeMap;
use std::sync::Arc;

fn node(kind: Kind) -> Arc<SoftMemoryNode> {
    SoftMemoryNode::create_with(
        NodeConfig {
            region_len: 32 << 20,
            ..NodeConfig::default()
        },
        Box::new(WortServer::new(kind)),
    )
    .unwrap()
}

fn single_client(kind: Kind) {
    let n = node(kind);
    let _srv = n.spawn_server();
    let ep = n.endpoint().unwrap();
    block_on(async {
        let t = Wort::open(&ep, WortClientConfig::default()).await.unwrap();
        let mut oracle: BTreeMap<u64, u64> = BTreeMap::new();
        let mut rng = 0x1234_5678_9abc_def1u64;
        let mut out = [0u8; 16];
        for i in 0..1000u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let key = (rng % 300).to_be_bytes();
            let k = rng % 300;
            match (rng >> 32) % 4 {
                0 | 1 => {
                    t.upsert(&key, &i.to_le_bytes()).await.unwrap();
                    oracle.insert(k, i);
                }
                2 => assert_eq!(t.delete(&key).await.unwrap(), oracle.remove(&k).is_some()),
                _ => {
                    let got = t.get(&key, &mut out).await.unwrap();
                    let got = got.map(|n| u64::from_le_bytes(out[..n].try_into().unwrap()));
                    assert_eq!(got, oracle.get(&k).copied(), "{kind:?} get {k}");
                }
            }
        }
        let mut seen = Vec::new();
        let n = t
            .scan(&0u64.to_be_bytes(), 1000, &mut |k, _| {
                seen.push(u64::from_be_bytes(k.try_into().unwrap()))
            })
            .await
            .unwrap();
        assert_eq!(n, oracle.len());
        assert_eq!(seen, oracle.keys().copied().collect::<Vec<_>>());
    });
}

#[test]
fn wort_single_client_matches_a_btreemap() {
    single_client(Kind::Wort);
}

#[test]
fn woart_single_client_matches_a_btreemap() {
    single_client(Kind::Woart);
}
