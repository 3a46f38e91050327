//! Model `server_store_window` (on in the `catfish` profile): a handler's stores reach the
//! NIC's view over its service, each at the point where its thread has been charged up to
//! it, so a one-sided READ overlapping a server's seqlocked rewrite sees it half done, as
//! Catfish's offloaded readers do (seeds/003 §3.2). With the model off every store lands at
//! the handler call and no READ sees a rewrite in progress.
use remora_core::fabric::{Endpoint, FabricError, Op, QueuePair, Recv};
use remora_core::server::{Handler, LocalRegion, Replies};
use remora_layouts::GlobalAddr;
use remora_poller::sim::{Model, Sim, SimConfig};
use std::cell::RefCell;
use std::rc::Rc;

/// The rewritten record: a version word, then `BODY` bytes.
const X: u64 = 1 << 20;
const BODY: usize = 256;
/// CPU the handler states between its version store and its body store.
const GAP_NS: u64 = 10_000;

/// Rewrites the record as a seqlock: version odd, `GAP_NS` of stated CPU, the body, the
/// version even; then answers.
struct Rewrite;

impl Handler for Rewrite {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        _conn: usize,
        _recv: Recv,
        _msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        region.store_u64(X, 1)?;
        region.charge_cpu_ns(GAP_NS);
        region.write(X + 8, &[0xBB; BODY])?;
        region.store_u64(X, 2)?;
        replies.send(b"ok");
        Ok(())
    }
}

/// What one READ of the record saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Before,
    /// Version odd, old body.
    Busy,
    After,
    Other,
}

fn seen(img: &[u8]) -> Seen {
    let version = u64::from_le_bytes(img[..8].try_into().unwrap());
    let body = &img[8..];
    match (
        version,
        body.iter().all(|&b| b == 0),
        body.iter().all(|&b| b == 0xBB),
    ) {
        (0, true, _) => Seen::Before,
        (1, true, _) => Seen::Busy,
        (2, _, true) => Seen::After,
        _ => Seen::Other,
    }
}

/// One client asks for the rewrite at 10 µs; another READs the record every 500 ns from 0
/// to 60 µs. Returns what each READ saw (in order) and when the rewrite was answered (ns).
fn reads_during_a_rewrite(window: bool) -> (Vec<Seen>, u64) {
    let mut model = Model::default();
    model
        .set("server_store_window", if window { "1" } else { "0" })
        .unwrap();
    let mut sim = Sim::new(SimConfig {
        model,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(Rewrite)).unwrap();
    let answered = Rc::new(std::cell::Cell::new(0u64));
    let writer = sim.client(0).unwrap();
    let a = answered.clone();
    sim.spawn_with(&writer, 0, move |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        ctx.ep().pause(10_000 - ctx.ep().now_ns()).await;
        qp.send(b"w").await.unwrap();
        let mut buf = [0u8; 16];
        qp.recv(&mut buf).await.unwrap();
        a.set(ctx.ep().now_ns());
    });
    let out = Rc::new(RefCell::new(Vec::new()));
    let reader = sim.client(0).unwrap();
    let o = out.clone();
    sim.spawn_with(&reader, 0, move |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        let mut img = [0u8; 8 + BODY];
        while ctx.ep().now_ns() < 60_000 {
            let mut ops = [Op::Read {
                remote: GlobalAddr::new(0, X),
                local: &mut img,
            }];
            qp.post(&mut ops).await.unwrap();
            o.borrow_mut().push(seen(&img));
            ctx.ep().pause(500).await;
        }
    });
    assert_eq!(sim.run().unfinished, 0);
    let seen = out.borrow().clone();
    (seen, answered.get())
}

#[test]
fn a_read_overlapping_a_server_rewrite_sees_it_half_done_only_with_the_window() {
    let (on, at_on) = reads_during_a_rewrite(true);
    let (off, at_off) = reads_during_a_rewrite(false);
    let count = |v: &[Seen], s: Seen| v.iter().filter(|&&x| x == s).count();
    println!(
        "window on: {} before, {} busy, {} after, {} other (answered at {at_on} ns); \
         off: {} before, {} busy, {} after, {} other (answered at {at_off} ns)",
        count(&on, Seen::Before),
        count(&on, Seen::Busy),
        count(&on, Seen::After),
        count(&on, Seen::Other),
        count(&off, Seen::Before),
        count(&off, Seen::Busy),
        count(&off, Seen::After),
        count(&off, Seen::Other),
    );
    // Off: the rewrite lands at one instant, never seen in progress.
    assert_eq!(count(&off, Seen::Busy) + count(&off, Seen::Other), 0);
    // On: the version is odd for the stated 10 µs before the body lands; the reader READs
    // about every 2.3 µs (a round trip and its 500 ns pause), so 3 to 5 of its READs see it.
    assert!(
        count(&on, Seen::Busy) >= 3,
        "window on: {} READs saw the rewrite in progress",
        count(&on, Seen::Busy)
    );
    // The order is the stores' order: before, in progress (odd version; with the new body
    // for the instant before the even version lands), after, never back.
    let rank = |s: Seen| match s {
        Seen::Before => 0,
        Seen::Busy | Seen::Other => 1,
        Seen::After => 2,
    };
    for w in on.windows(2) {
        assert!(rank(w[1]) >= rank(w[0]), "{on:?}");
    }
    // Every store has landed by the reply, which is posted after the service; the service
    // (and so the answer) takes the same time either way.
    assert_eq!(on.last(), Some(&Seen::After));
    assert_eq!(off.last(), Some(&Seen::After));
    assert!((20_000..40_000).contains(&at_on), "answered at {at_on}");
    assert!(at_on.abs_diff(at_off) < 1_000, "{at_on} vs {at_off}");
}
