//! Erda's log-structured hash store through the compute node: its in-process memory node
//! runs the `erda` service. Keys up to 16 bytes. Erda is a hash store: a scan is an error,
//! and the example checks that it says so. Exits non-zero on a wrong answer.
use remora::core::erda::ErdaConfig;
use remora::node::{ComputeNode, Error, IndexConfig, NodeConfig, Service};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let node = ComputeNode::builder()
        .in_process(NodeConfig::default(), Service::Erda(ErdaConfig::small()))
        .start()?;
    let store = node.open(IndexConfig::erda())?;
    for i in 0..500u32 {
        let key = format!("sensor-{i}");
        store
            .upsert(key.as_bytes(), format!("reading {i}").as_bytes())
            .wait()?;
    }
    for i in 0..500u32 {
        let key = format!("sensor-{i}");
        let v = store.get(key.as_bytes()).wait()?;
        assert_eq!(
            v.as_deref(),
            Some(format!("reading {i}").as_bytes()),
            "{key}"
        );
    }
    assert!(store.delete(b"sensor-1").wait()?);
    assert_eq!(store.get(b"sensor-1").wait()?, None);
    match store.scan(b"", None, 10).next() {
        Some(Err(Error::Erda(e))) => println!("erda: 500 keys checked; a scan says: {e}"),
        other => return Err(format!("a scan of a hash store returned {other:?}").into()),
    }
    Ok(())
}
