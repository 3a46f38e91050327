//! CANRT's radix tree through the compute node: its in-process memory node runs the `canrt`
//! service (metadata applier, resizer). 8-byte keys, values up to 8 bytes.
//! Exits non-zero on a wrong answer.
use remora::node::{ComputeNode, IndexConfig, NodeConfig, Service};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let node = ComputeNode::builder()
        .in_process(NodeConfig::default(), Service::Canrt)
        .start()?;
    let tree = node.open(IndexConfig::canrt())?;
    for k in 0..1000u64 {
        tree.upsert(&k.to_be_bytes(), &(k + 7).to_le_bytes())
            .wait()?;
    }
    for k in 0..1000u64 {
        let v = tree.get(&k.to_be_bytes()).wait()?;
        assert_eq!(v, Some((k + 7).to_le_bytes().to_vec()), "key {k}");
    }
    assert!(
        tree.update(&3u64.to_be_bytes(), &42u64.to_le_bytes())
            .wait()?
    );
    assert_eq!(
        tree.get(&3u64.to_be_bytes()).wait()?,
        Some(42u64.to_le_bytes().to_vec())
    );
    let n = tree
        .scan(&100u64.to_be_bytes(), Some(&200u64.to_be_bytes()), 1000)
        .collect::<Result<Vec<_>, _>>()?
        .len();
    assert_eq!(n, 100, "keys in [100, 200)");
    println!("canrt: 1000 keys written and read back, {n} keys in [100, 200)");
    Ok(())
}
