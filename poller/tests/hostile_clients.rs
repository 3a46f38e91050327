//! Hostile clients against every memory-node service on the simulated cluster: while honest
//! clients run a checked workload (a `lin_client` history for the key-value services,
//! inserts then searches for Catfish, echoes for echo), two hostile clients of the same node
//! send random bytes, truncated, oversized and field-mutated copies of messages the node saw
//! from honest clients, replays of them, WRITE_WITH_IMMs with random immediates to random
//! in-range offsets, and floods of SENDs they never read the replies of. The node must never
//! panic or hang, a refused message drops only the hostile connection (the hostile client
//! reconnects and carries on), and the honest clients must finish with their data intact.
//!
//! Deterministic: each service runs seeds `1..=HOSTILE_SEEDS` (default 2).
//! `HOSTILE_MSGS=n` sets the messages per hostile client (default 300).
//!
//! Hostile WRITE_WITH_IMMs carry no bytes: one-sided writes of garbage into memory honest
//! clients use are outside any server's control (the region key lets a client write where
//! it likes); what a server controls is what it does with the immediate and the message.
use remora_core::canrt::{Canrt, CanrtConfig, CanrtServer};
use remora_core::catfish::{CatfishClient, CatfishServer, Mode, Rect, TreeKind};
use remora_core::erda::baseline::{Baseline, BaselineServer, Scheme};
use remora_core::erda::{Erda, ErdaClientConfig, ErdaConfig, ErdaServer};
use remora_core::fabric::{Endpoint, FabricError, Op, QueuePair, Recv, RecvKind};
use remora_core::index::KvIndex;
use remora_core::lincheck::driver::{LinSpec, lin_client};
use remora_core::lincheck::{CheckConfig, Recorder, check};
use remora_core::server::{Echo, Handler, LocalRegion, Replies};
use remora_core::wort::{Kind, Wort, WortServer};
use remora_layouts::GlobalAddr;
use remora_poller::sim::{ClientCtx, Sim, SimConfig};
use std::cell::RefCell;
use std::rc::Rc;

#[path = "common/hooked.rs"]
mod hooked;
use hooked::{HookedEp, PostHook};

const HONEST: u32 = 6;
const HOSTILE: u32 = 2;
const OPS: u64 = 120;
/// Samples of honest traffic the hostile clients mutate.
const SAMPLES: usize = 256;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// splitmix64: the hostile clients' own random stream (a reconnected `ClientCtx` restarts
/// its stream, so the test keeps its own).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

/// One message a node received.
#[derive(Clone, Debug)]
struct Sample {
    kind: RecvKind,
    imm: Option<u32>,
    /// A SEND's payload, or (recorded on the hostile client's own side) a WRITE_WITH_IMM's data.
    msg: Vec<u8>,
    /// Where a recorded WRITE_WITH_IMM wrote.
    at: Option<u64>,
}

/// What the tapped node saw.
#[derive(Default)]
struct Log {
    seen: u64,
    refused: u64,
    samples: Vec<Sample>,
}

/// The service's handler, with a record of its traffic (a reservoir of samples).
struct Tap<'a> {
    inner: Box<dyn Handler + 'a>,
    log: Rc<RefCell<Log>>,
}

impl Handler for Tap<'_> {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        {
            let mut log = self.log.borrow_mut();
            log.seen += 1;
            let s = Sample {
                kind: recv.kind,
                imm: recv.imm,
                msg: msg.to_vec(),
                at: None,
            };
            let n = log.seen;
            if log.samples.len() < SAMPLES {
                log.samples.push(s);
            } else {
                let i = Rng(n).next() % n;
                if (i as usize) < SAMPLES {
                    log.samples[i as usize] = s;
                }
            }
        }
        let r = self.inner.on_message(region, conn, recv, msg, replies);
        if r.is_err() {
            self.log.borrow_mut().refused += 1;
        }
        r
    }
    fn on_idle(&mut self, region: &dyn LocalRegion) -> bool {
        self.inner.on_idle(region)
    }
    fn recover(&mut self, region: &dyn LocalRegion) -> Result<String, FabricError> {
        self.inner.recover(region)
    }
    fn on_disconnect(&mut self, region: &dyn LocalRegion, conn: usize) {
        self.inner.on_disconnect(region, conn)
    }
    fn service(&self) -> &'static str {
        self.inner.service()
    }
}

/// Records what a hostile client's own index handle posts (its SENDs, its immediates).
#[derive(Clone)]
struct Recording(Rc<RefCell<Vec<Sample>>>);

impl<Q: QueuePair> PostHook<Q> for Recording {
    async fn post<'a, 'b>(&'a self, qp: &'a Q, ops: &'a mut [Op<'b>]) -> Result<(), FabricError> {
        for op in ops.iter() {
            let s = match op {
                Op::Send { local } => Sample {
                    kind: RecvKind::Send,
                    imm: None,
                    msg: local.to_vec(),
                    at: None,
                },
                Op::WriteImm {
                    imm, local, remote, ..
                } => Sample {
                    kind: RecvKind::WriteImm,
                    imm: Some(*imm),
                    msg: local.to_vec(),
                    at: Some(remote.offset()),
                },
                _ => continue,
            };
            self.0.borrow_mut().push(s);
        }
        qp.post(ops).await
    }
}

/// The hostile clients' own keys (a client number no honest client has).
fn own_key(j: u64) -> [u8; 8] {
    (250u64 << 40 | j).to_be_bytes()
}

/// Values a mutated field takes: edges, the region's length, random.
fn interesting(rng: &mut Rng, region_len: u64) -> u64 {
    match rng.below(9) {
        0 => 0,
        1 => 1,
        2 => u64::MAX,
        3 => u32::MAX as u64,
        4 => u16::MAX as u64,
        5 => region_len,
        6 => region_len - 8,
        7 => 1 << rng.below(64),
        _ => rng.next(),
    }
}

/// A copy of `m` with one to four fields (a byte, u16, u32 or u64) overwritten.
fn mutate(rng: &mut Rng, m: &[u8], region_len: u64) -> Vec<u8> {
    let mut m = m.to_vec();
    if m.is_empty() {
        return m;
    }
    for _ in 0..1 + rng.below(4) {
        let width = [1usize, 2, 4, 8][rng.below(4) as usize].min(m.len());
        let at = rng.below((m.len() - width + 1) as u64) as usize;
        let v = interesting(rng, region_len).to_le_bytes();
        m[at..at + width].copy_from_slice(&v[..width]);
    }
    m
}

#[derive(Default, Debug, Clone, Copy)]
struct Sent {
    sends: u64,
    imms: u64,
    reconnects: u64,
    replies: u64,
}

/// What one hostile client sends, and where it counts what it did.
struct Attack {
    /// What the node saw (everyone's traffic).
    log: Rc<RefCell<Log>>,
    /// The hostile client's own valid traffic (empty: the service has no own workload).
    own: Rc<RefCell<Vec<Sample>>>,
    /// It may rewrite the data of its own WRITE_WITH_IMMs (its own request slot).
    own_writes: bool,
    /// It may send other clients' SENDs (they carry no writes in this service).
    foreign: bool,
    rng: Rng,
    msgs: u64,
    region_len: u64,
    sent: Rc<RefCell<Sent>>,
}

/// One hostile client: `msgs` hostile messages to memory node 0, reconnecting whenever the
/// node drops its connection.
async fn hostile(first: ClientCtx, a: Attack) {
    let Attack {
        log,
        own,
        own_writes,
        foreign,
        mut rng,
        msgs,
        region_len,
        sent,
    } = a;
    let mut ctx = first;
    // Let honest clients open first so there is traffic to sample.
    ctx.sleep(20_000 + rng.below(50_000)).await;
    let mut buf = vec![0u8; ctx.qp(0).unwrap().max_message()];
    let mut i = 0;
    while i < msgs {
        if ctx.qp(0).unwrap().is_broken() {
            ctx = ctx.reconnect();
            sent.borrow_mut().reconnects += 1;
            // Mostly greet the node again the way the own handle did (a session to attack).
            let hello = own
                .borrow()
                .iter()
                .find(|s| s.kind == RecvKind::Send)
                .cloned();
            if let (Some(h), true) = (hello, rng.below(4) != 0) {
                let qp = ctx.qp(0).unwrap();
                i += 1;
                sent.borrow_mut().sends += 1;
                if qp.send(&h.msg).await.is_ok() {
                    ctx.sleep(5_000).await;
                    while let Ok(Some(_)) = qp.try_recv(&mut buf) {
                        sent.borrow_mut().replies += 1;
                    }
                }
            }
        }
        let qp = ctx.qp(0).unwrap();
        let max = qp.max_message();
        // Message bytes come from the hostile client's own valid traffic where it has any
        // (a replayed write of an honest client's key is a legitimate write, not an attack);
        // immediates, and the bytes of services without an own workload, from everyone's.
        let sample = {
            let (log, own) = (log.borrow(), own.borrow());
            let pool = if own.is_empty() || foreign && rng.below(2) == 0 {
                &log.samples
            } else {
                &*own
            };
            let mut s =
                (!pool.is_empty()).then(|| pool[rng.below(pool.len() as u64) as usize].clone());
            if let (Some(s), false) = (s.as_mut(), log.samples.is_empty()) {
                let other = &log.samples[rng.below(log.samples.len() as u64) as usize];
                if s.kind == RecvKind::WriteImm && other.imm.is_some() && rng.below(2) == 0 {
                    s.imm = other.imm;
                }
            }
            s
        };
        // (SENDs, then WRITE_WITH_IMMs as (offset, imm)).
        let mut sends: Vec<Vec<u8>> = Vec::new();
        let mut imms: Vec<(u64, u32, Vec<u8>)> = Vec::new();
        let msg = sample.as_ref().map_or(&[][..], |s| &s.msg[..]);
        let mut flood = false;
        let own_write = sample
            .as_ref()
            .filter(|s| own_writes && s.kind == RecvKind::WriteImm)
            .and_then(|s| Some((s.at?, s.imm?)));
        match rng.below(if own_write.is_some() { 12 } else { 10 }) {
            10 | 11 => {
                // Its own request slot, rewritten: mutated, truncated or random bytes.
                let (at, imm) = own_write.unwrap();
                let data = match rng.below(3) {
                    0 => mutate(&mut rng, msg, region_len),
                    1 => msg[..rng.below(msg.len() as u64 + 1) as usize].to_vec(),
                    _ => (0..rng.below(msg.len() as u64 + 64))
                        .map(|_| rng.next() as u8)
                        .collect(),
                };
                imms.push((at, imm, data));
            }
            0 => {
                let n = rng.below(max as u64 + 1) as usize;
                sends.push((0..n).map(|_| rng.next() as u8).collect());
            }
            1 => sends.push(msg[..rng.below(msg.len() as u64 + 1) as usize].to_vec()),
            2 => {
                let mut m = msg.to_vec();
                let extra = rng.below((max - m.len().min(max)) as u64 + 1) as usize;
                m.extend((0..extra).map(|_| rng.next() as u8));
                sends.push(m);
            }
            3 | 4 => sends.push(mutate(&mut rng, msg, region_len)),
            5 => {
                // A replay, several times over: of a SEND, or of another client's immediate.
                for _ in 0..1 + rng.below(8) {
                    match sample.as_ref().map(|s| (s.kind, s.imm)) {
                        Some((RecvKind::WriteImm, imm)) => {
                            imms.push((rng.below(region_len / 8) * 8, imm.unwrap_or(0), Vec::new()))
                        }
                        _ => sends.push(msg.to_vec()),
                    }
                }
            }
            6 => {
                let imm = match sample.as_ref().and_then(|s| s.imm) {
                    Some(imm) if rng.below(2) == 0 => imm ^ (1 << rng.below(32)),
                    _ => rng.next() as u32,
                };
                imms.push((rng.below(region_len), imm, Vec::new()));
            }
            7 => {
                // A flood beyond the posted receives, replies unread.
                flood = true;
                for _ in 0..32 + rng.below(64) {
                    sends.push(mutate(&mut rng, msg, region_len));
                }
            }
            _ => {
                let imm = rng.next() as u32;
                imms.push((rng.below(region_len / 8) * 8, imm, Vec::new()));
            }
        }
        if flood {
            // All in one doorbell: more SENDs than the node has receives posted.
            i += sends.len() as u64;
            sent.borrow_mut().sends += sends.len() as u64;
            let mut ops: Vec<Op> = sends.iter().map(|m| Op::Send { local: m }).collect();
            let _ = qp.post(&mut ops).await;
            sends.clear();
        }
        for m in &sends {
            i += 1;
            sent.borrow_mut().sends += 1;
            if qp.send(m).await.is_err() {
                break;
            }
        }
        for (off, imm, data) in &imms {
            let (off, imm) = (*off, *imm);
            i += 1;
            sent.borrow_mut().imms += 1;
            let mut ops = [Op::WriteImm {
                remote: GlobalAddr::new(0, off),
                local: data,
                imm,
            }];
            if qp.post(&mut ops).await.is_err() {
                break;
            }
        }
        ctx.sleep(1_000 + rng.below(20_000)).await;
        while let Ok(Some(_)) = qp.try_recv(&mut buf) {
            sent.borrow_mut().replies += 1;
        }
    }
}

/// Spawns the hostile clients on compute node 3.
fn spawn_hostile<'a>(
    sim: &mut Sim<'a>,
    log: &Rc<RefCell<Log>>,
    seed: u64,
    region_len: u64,
    sent: &Rc<RefCell<Sent>>,
) {
    for h in 0..HOSTILE {
        let ctx = sim.client(3).unwrap();
        let (log, sent) = (log.clone(), sent.clone());
        let rng = Rng(seed << 8 | h as u64);
        sim.spawn_with(&ctx, 100 + h as u64, move |ctx| {
            hostile(
                ctx,
                Attack {
                    log,
                    own: Rc::default(),
                    own_writes: false,
                    foreign: true,
                    rng,
                    msgs: hostile_msgs(),
                    region_len,
                    sent,
                },
            )
        });
    }
}

fn hostile_msgs() -> u64 {
    env_or("HOSTILE_MSGS", 300)
}

fn sim_cfg(seed: u64, region_len: u64) -> SimConfig {
    SimConfig {
        compute_nodes: 4,
        memory_nodes: 1,
        region_len,
        chunk_size: 128 << 10,
        seed,
        ..SimConfig::default()
    }
}

fn report(name: &str, seed: u64, log: &Rc<RefCell<Log>>, sent: &Rc<RefCell<Sent>>) {
    let (l, s) = (log.borrow(), *sent.borrow());
    println!(
        "{name} seed {seed}: node saw {} messages, refused {}; hostile sent {} SENDs, {} \
         WRITE_WITH_IMMs, read {} replies, reconnected {} times",
        l.seen, l.refused, s.sends, s.imms, s.replies, s.reconnects
    );
    assert!(
        s.sends + s.imms > 0,
        "{name} seed {seed}: nothing hostile was sent"
    );
}

#[path = "hostile_clients/campaigns.rs"]
mod campaigns;
#[path = "hostile_clients/regressions.rs"]
mod regressions;
