//! Sherman's B+tree through the compute node: 8-byte big-endian keys, 8-byte values.
//! Exits non-zero on a wrong answer.
use remora::node::{ComputeNode, IndexConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let node = ComputeNode::builder().in_process_default().start()?;
    let tree = node.open(IndexConfig::sherman())?;
    for k in 0..2000u64 {
        tree.upsert(&k.to_be_bytes(), &(k * 3).to_le_bytes())
            .wait()?;
    }
    for k in (0..2000u64).step_by(7) {
        let v = tree.get(&k.to_be_bytes()).wait()?;
        assert_eq!(v, Some((k * 3).to_le_bytes().to_vec()), "key {k}");
    }
    assert!(tree.delete(&5u64.to_be_bytes()).wait()?);
    // Keys 1..10 without 5, in order.
    let keys: Vec<u64> = tree
        .scan(&1u64.to_be_bytes(), Some(&10u64.to_be_bytes()), 100)
        .map(|r| r.map(|(k, _)| u64::from_be_bytes(k.try_into().unwrap())))
        .collect::<Result<_, _>>()?;
    assert_eq!(keys, [1, 2, 3, 4, 6, 7, 8, 9]);
    println!("sherman: 2000 keys written, 286 read back, a scan of [1, 10): {keys:?}");
    Ok(())
}
