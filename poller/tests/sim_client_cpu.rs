//! Client CPU work stated with `Endpoint::charge` / `QueuePair::charge`: the sim makes it
//! debt of the charging coroutine, paid on its client thread's CPU (serialised with the
//! thread's other coroutines and posts) before its next post, pause or settle.
use remora_core::fabric::{Endpoint, QueuePair, Work};
use remora_layouts::GlobalAddr;
use remora_poller::sim::{Model, Sim, SimConfig};
use std::cell::RefCell;

/// `coroutines` coroutines on one client thread each charge `work` (through the endpoint,
/// or the queue pair), then READ 64 bytes; returns each READ's completion time (ns).
fn charge_then_read(model: Model, coroutines: u64, work: Option<Work>, via_qp: bool) -> Vec<u64> {
    let done = RefCell::new(Vec::new());
    {
        let mut sim = Sim::new(SimConfig {
            model,
            ..SimConfig::default()
        })
        .unwrap();
        let ctx = sim.client(0).unwrap();
        let done = &done;
        for co in 0..coroutines {
            sim.spawn_with(&ctx, co, move |ctx| async move {
                let qp = ctx.qp(0).unwrap();
                if let Some(w) = work {
                    if via_qp {
                        qp.charge(w);
                    } else {
                        ctx.ep().charge(w);
                    }
                }
                let mut b = [0u8; 64];
                qp.read(GlobalAddr::new(0, 4096), &mut b).await.unwrap();
                done.borrow_mut().push(ctx.now_ns());
            });
        }
        assert_eq!(sim.run().unfinished, 0);
    }
    let mut v = done.into_inner();
    v.sort_unstable();
    v
}

#[test]
fn charged_work_delays_the_next_post_by_its_model_cost() {
    let m = Model::default();
    let base = charge_then_read(m.clone(), 1, None, false)[0];
    // 1000 entries scanned at client_scan_ns each.
    let want = (1000.0 * m.client_scan_ns).round() as u64;
    for via_qp in [false, true] {
        let t = charge_then_read(m.clone(), 1, Some(Work::Scan(1000)), via_qp)[0];
        assert_eq!(t - base, want, "via_qp {via_qp}");
    }
    // client_cpu_scale multiplies it; 0 charges nothing.
    let mut slow = m.clone();
    slow.set("client_cpu_scale", "2").unwrap();
    let t = charge_then_read(slow, 1, Some(Work::Scan(1000)), false)[0];
    assert_eq!(t - base, 2 * want);
    let mut free = m.clone();
    free.set("client_cpu_scale", "0").unwrap();
    assert_eq!(
        charge_then_read(free, 1, Some(Work::Scan(1000)), false)[0],
        base
    );
}

#[test]
fn coroutines_of_one_thread_share_its_cpu() {
    let m = Model::default();
    let work = Work::Crc64(100_000);
    let one = charge_then_read(m.clone(), 1, Some(work), false)[0];
    let base = charge_then_read(m.clone(), 1, None, false)[0];
    let each = one - base;
    assert!(each > 20_000, "{each} ns for 100 kB of CRC-64");
    // Four coroutines' work is done one after another on the one CPU: the last READ
    // completes about four times the work later.
    let four = charge_then_read(m, 4, Some(work), false);
    let last = four[3] - base;
    assert!(
        last >= 4 * each - 1_000 && last <= 4 * each + 1_000,
        "last of 4: {last} ns, one: {each} ns"
    );
}

#[test]
fn settle_and_pause_pay_the_debt() {
    let m = Model::default();
    let want = (500.0 * m.client_probe_ns).round() as u64;
    let out = RefCell::new(Vec::new());
    {
        let mut sim = Sim::new(SimConfig {
            model: m,
            ..SimConfig::default()
        })
        .unwrap();
        let ctx = sim.client(0).unwrap();
        let out = &out;
        sim.spawn_with(&ctx, 0, move |ctx| async move {
            let t0 = ctx.now_ns();
            ctx.charge(Work::Probe(500));
            ctx.settle().await;
            let t1 = ctx.now_ns();
            // Nothing left: settling again takes no time.
            ctx.settle().await;
            let t2 = ctx.now_ns();
            ctx.ep().charge(Work::Probe(500));
            ctx.ep().pause(10).await;
            let t3 = ctx.now_ns();
            out.borrow_mut().extend([t1 - t0, t2 - t1, t3 - t2]);
        });
        assert_eq!(sim.run().unfinished, 0);
    }
    assert_eq!(out.into_inner(), vec![want, 0, want + 10]);
}
