//! Server-side logic (`remora_core::server::Handler`) on the soft fabric and the sim: the
//! handler sees every SEND and WRITE_WITH_IMM of every connection, works on the node's memory
//! locally, replies, and a handler error drops that connection only.
use remora_core::block_on::block_on;
use remora_core::fabric::{Endpoint, FabricError, Op, QueuePair, Recv, RecvKind};
use remora_core::server::{Handler, LocalRegion, Replies};
use remora_layouts::GlobalAddr;
use remora_poller::sim::{Sim, SimConfig};
use remora_poller::soft::{NodeConfig, SoftMemoryNode};
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Word the counter service adds to, and where WRITE_WITH_IMM data is summed from.
const COUNTER: u64 = 4096;
const DATA: u64 = 8192;

/// `ADD` + u64: adds to the counter word with the node's CPU and replies with the new value.
/// WRITE_WITH_IMM of n bytes at DATA: replies with the sum of those bytes. `BAD!`: refuses.
struct CounterService {
    idle: Arc<AtomicU64>,
}

impl Handler for CounterService {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        _conn: usize,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        match recv.kind {
            RecvKind::Send if msg.len() == 11 && &msg[..3] == b"ADD" => {
                let add = u64::from_le_bytes(msg[3..].try_into().unwrap());
                let mut cur = region.load_u64(COUNTER)?;
                loop {
                    let seen = region.cas_u64(COUNTER, cur, cur + add)?;
                    if seen == cur {
                        break;
                    }
                    cur = seen;
                }
                replies.send(&(cur + add).to_le_bytes());
                Ok(())
            }
            RecvKind::WriteImm => {
                let mut data = vec![0u8; recv.len as usize];
                region.read(DATA, &mut data)?;
                let sum: u64 = data.iter().map(|&b| b as u64).sum();
                replies.send(&sum.to_le_bytes());
                Ok(())
            }
            _ => Err(FabricError::Unsupported {
                what: "message the counter service does not know",
            }),
        }
    }

    fn on_idle(&mut self, _region: &dyn LocalRegion) -> bool {
        self.idle.fetch_add(1, Ordering::Relaxed);
        false
    }
}

fn add_msg(v: u64) -> [u8; 11] {
    let mut m = [0u8; 11];
    m[..3].copy_from_slice(b"ADD");
    m[3..].copy_from_slice(&v.to_le_bytes());
    m
}

/// One client's session: adds, a WRITE_WITH_IMM, then a message the service refuses.
async fn session<Q: QueuePair>(qp: &Q, adds: u64) -> Result<u64, FabricError> {
    let mut reply = vec![0u8; qp.max_message()];
    let mut last = 0;
    for _ in 0..adds {
        qp.send(&add_msg(1)).await?;
        let r = qp.recv(&mut reply).await?;
        let v = u64::from_le_bytes(reply[..r.len as usize].try_into().unwrap());
        assert!(v > last, "counter went backwards: {last} -> {v}");
        last = v;
    }
    let data = [3u8; 100];
    qp.post(&mut [Op::WriteImm {
        remote: GlobalAddr::new(qp.peer(), DATA),
        local: &data,
        imm: 1,
    }])
    .await?;
    let r = qp.recv(&mut reply).await?;
    assert_eq!(
        u64::from_le_bytes(reply[..r.len as usize].try_into().unwrap()),
        300
    );
    Ok(last)
}

#[test]
fn soft_node_runs_a_handler() {
    let idle = Arc::new(AtomicU64::new(0));
    let node = SoftMemoryNode::create_with(
        NodeConfig::default(),
        Box::new(CounterService { idle: idle.clone() }),
    )
    .unwrap();
    let _server = node.spawn_server();
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                let ep = node.endpoint().unwrap();
                block_on(session(ep.qp(0).unwrap(), 200)).unwrap();
            });
        }
    });
    let ep = node.endpoint().unwrap();
    let qp = ep.qp(0).unwrap();
    let mut b = [0u8; 8];
    block_on(qp.read(GlobalAddr::new(0, COUNTER), &mut b)).unwrap();
    assert_eq!(
        u64::from_le_bytes(b),
        600,
        "the handler's CPU adds were lost"
    );
    // A refused message drops that connection: the client gets an error, not a hang...
    block_on(qp.send(b"BAD!")).unwrap();
    let mut reply = [0u8; 64];
    assert!(matches!(
        block_on(qp.recv(&mut reply)),
        Err(FabricError::RetryExceeded { .. })
    ));
    // ...and the node keeps serving everyone else.
    let ep2 = node.endpoint().unwrap();
    assert_eq!(block_on(session(ep2.qp(0).unwrap(), 1)).unwrap(), 601);
    assert!(idle.load(Ordering::Relaxed) > 0, "on_idle never ran");
}

#[test]
fn sim_node_runs_a_handler() {
    let done = RefCell::new(Vec::new());
    let mut sim = Sim::new(SimConfig {
        compute_nodes: 3,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(
        0,
        Box::new(CounterService {
            idle: Arc::new(AtomicU64::new(0)),
        }),
    )
    .unwrap();
    for n in 0..3 {
        let c = sim.client(n).unwrap();
        let done = &done;
        sim.spawn_with(&c, 0, move |ctx| async move {
            let r = session(ctx.qp(0).unwrap(), 50).await;
            done.borrow_mut().push(r);
        });
    }
    let r = sim.run();
    assert_eq!(r.unfinished, 0);
    let host = sim.host_bytes(0, COUNTER, 8).unwrap();
    drop(sim);
    let done = done.into_inner();
    assert_eq!(done.len(), 3);
    let highest = done.iter().map(|r| *r.as_ref().unwrap()).max().unwrap();
    assert_eq!(highest, 150, "the last add saw every other");
    assert_eq!(u64::from_le_bytes(host.try_into().unwrap()), 150);
}
