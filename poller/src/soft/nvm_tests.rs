//! A persistent soft node counts the bytes written to its host region as the sim does
//! (`nvm.rs`): what its clients' verbs placed, what its handlers stored, the lines they wrote
//! back; device memory and a DRAM node count nothing.
use super::{NodeConfig, SoftMemoryNode};
use crate::sim::NvmStats;
use remora_core::block_on::block_on;
use remora_core::fabric::{FabricError, Op, QueuePair, Recv};
use remora_core::server::{Handler, LocalRegion, Replies};
use remora_layouts::GlobalAddr;
use std::time::{Duration, Instant};

/// Where the test writes: past the region's first chunk, which nothing else uses here.
const AT: u64 = 2 << 20;

/// On each message: stores 24 bytes and a word, a CAS that swaps and one that does not, and
/// writes back 130 bytes from a line boundary (3 lines).
struct Stores;

impl Handler for Stores {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        _conn: usize,
        _recv: Recv,
        _msg: &[u8],
        _replies: &mut Replies,
    ) -> Result<(), FabricError> {
        region.write(AT + 4096, &[1u8; 24])?;
        region.store_u64(AT + 4096 + 64, 5)?;
        assert_eq!(region.cas_u64(AT + 4096 + 64, 5, 6)?, 5);
        assert_eq!(region.cas_u64(AT + 4096 + 64, 5, 7)?, 6);
        region.persist(AT + 4096, 130);
        Ok(())
    }
}

fn node(nvm_write_ns: u32) -> std::sync::Arc<SoftMemoryNode> {
    let cfg = NodeConfig {
        region_len: 4 << 20,
        nvm_write_ns,
        ..NodeConfig::default()
    };
    SoftMemoryNode::create_with(cfg, Box::new(Stores)).unwrap()
}

#[test]
fn a_persistent_node_counts_what_is_written_to_its_region_by_cause() {
    let node = node(1);
    let _srv = node.spawn_server();
    let ep = node.endpoint().unwrap();
    let qp = &ep.qps()[0];
    assert_eq!(node.nvm_stats(), Some(NvmStats::default()));
    let at = GlobalAddr::new(0, AT);
    let (mut swapped, mut kept, mut added) = (0, 0, 0);
    block_on(async {
        qp.write(at, &[9u8; 100]).await.unwrap();
        qp.write(GlobalAddr::device(0, 0), &[9u8; 64])
            .await
            .unwrap();
        let mut ops = [
            Op::Cas {
                remote: at.add(128),
                compare: 0,
                swap: 1,
                old: &mut swapped,
            },
            Op::Cas {
                remote: at.add(128),
                compare: 0,
                swap: 2,
                old: &mut kept,
            },
            Op::Faa {
                remote: at.add(136),
                add: 3,
                old: &mut added,
            },
            Op::WriteImm {
                remote: at.add(256),
                local: &[4u8; 16],
                imm: 1,
            },
        ];
        qp.post(&mut ops).await.unwrap();
    });
    assert_eq!((swapped, kept, added), (0, 1, 0));
    let want = NvmStats {
        nic_write: 100,
        nic_write_imm: 16,
        nic_atomic: 16,
        cpu_store: 24 + 8 + 8,
        lines_flushed: 3,
    };
    let t = Instant::now();
    while node.nvm_stats() != Some(want) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(node.nvm_stats(), Some(want));
}

#[test]
fn a_dram_node_counts_nothing() {
    let node = node(0);
    let ep = node.endpoint().unwrap();
    block_on(ep.qps()[0].write(GlobalAddr::new(0, AT), &[1u8; 64])).unwrap();
    assert_eq!(node.nvm_stats(), None);
}
