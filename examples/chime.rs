//! CHIME's B+tree with hopscotch-hashed leaves through the compute node: 8-byte big-endian
//! keys, 8-byte values; several application threads share one handle, and the hotspot
//! buffer and index cache are the compute node's. Exits non-zero on a wrong answer.
use remora::node::{ComputeNode, IndexConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let node = ComputeNode::builder().in_process_default().start()?;
    let tree = node.open(IndexConfig::chime())?;
    // Four threads write interleaved keys through clones of one handle.
    std::thread::scope(|s| -> Result<(), remora::node::Error> {
        let writers: Vec<_> = (0..4u64)
            .map(|t| {
                let tree = tree.clone();
                s.spawn(move || -> Result<(), remora::node::Error> {
                    for k in (t..4000).step_by(4) {
                        tree.upsert(&k.to_be_bytes(), &(k * 3).to_le_bytes())
                            .wait()?;
                    }
                    Ok(())
                })
            })
            .collect();
        for w in writers {
            w.join().expect("a writer panicked")?;
        }
        Ok(())
    })?;
    for k in (0..4000u64).step_by(7) {
        let v = tree.get(&k.to_be_bytes()).wait()?;
        assert_eq!(v, Some((k * 3).to_le_bytes().to_vec()), "key {k}");
    }
    assert!(
        tree.update(&9u64.to_be_bytes(), &1u64.to_le_bytes())
            .wait()?
    );
    assert!(tree.delete(&5u64.to_be_bytes()).wait()?);
    assert_eq!(tree.get(&5u64.to_be_bytes()).wait()?, None);
    // Keys 1..10 without 5, in order (a hash leaf's keys are sorted for the scan).
    let keys: Vec<u64> = tree
        .scan(&1u64.to_be_bytes(), Some(&10u64.to_be_bytes()), 100)
        .map(|r| r.map(|(k, _)| u64::from_be_bytes(k.try_into().unwrap())))
        .collect::<Result<_, _>>()?;
    assert_eq!(keys, [1, 2, 3, 4, 6, 7, 8, 9]);
    println!("chime: 4000 keys written by 4 threads, 572 read back, a scan of [1, 10): {keys:?}");
    Ok(())
}
