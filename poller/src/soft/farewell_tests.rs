//! A memory node whose service refuses what a client sent (a geometry, a version) says why
//! to that client: the reason travels over the connection's control socket before its rings
//! close, and the client's verbs fail with it instead of a bare `RetryExceeded` (issue 26).
use super::{NodeConfig, SoftMemoryNode, control};
use remora_core::block_on::block_on;
use remora_core::fabric::{FabricError, QueuePair, Recv};
use remora_core::server::{Handler, LocalRegion, Replies};
use remora_layouts::GlobalAddr;

const WHY: &str = "this node serves 64-slot buckets, the client asked for 32";

/// Refuses every message.
struct Refuser;

impl Handler for Refuser {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        _conn: usize,
        _recv: Recv,
        _msg: &[u8],
        _replies: &mut Replies,
    ) -> Result<(), FabricError> {
        Err(FabricError::RemoteInvalid {
            wr: 0,
            addr: GlobalAddr::new(region.node(), 0),
            why: WHY,
        })
    }
}

#[test]
fn a_refused_client_hears_the_reason() {
    let dir = std::env::temp_dir().join(format!("remora-farewell-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sock");
    let cfg = NodeConfig {
        region_len: 4 << 20,
        dm_len: 0,
        ..NodeConfig::default()
    };
    let node = SoftMemoryNode::create_with(cfg, Box::new(Refuser)).unwrap();
    let _srv = node.spawn_server();
    let _l = control::listen(&node, &path).unwrap();
    let qp = control::connect(&path).unwrap();
    block_on(qp.send(b"hello, 32 slots")).unwrap();
    let mut buf = [0u8; 64];
    let err = block_on(qp.recv(&mut buf)).unwrap_err();
    let shown = err.to_string();
    assert!(
        matches!(err, FabricError::RemoteInvalid { .. }) && shown.contains(WHY),
        "the client got {err:?}"
    );
    // Every later verb says the same.
    let again = block_on(qp.send(b"again")).unwrap_err();
    assert!(
        again == FabricError::Flushed || again.to_string().contains(WHY),
        "{again:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
