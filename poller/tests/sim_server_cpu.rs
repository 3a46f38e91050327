//! The sim's server CPU model: a handler's cost follows the memory it touches. Each distinct
//! 64-byte line a message's handler reads or writes is a hit in the node's last-level cache
//! (`server_llc_hit_ns`) or a miss (`server_dram_ns`, or `server_nvm_read_ns` on persistent
//! memory); the lines of one contiguous access overlap (`server_mlp`); NIC writes are placed
//! in the cache (DDIO).
use remora_core::fabric::{FabricError, QueuePair, Recv};
use remora_core::server::{Handler, LocalRegion, Replies};
use remora_layouts::GlobalAddr;
use remora_poller::sim::{LlcStats, Model, Sim, SimConfig};

/// Lines far apart (each its own line, none the region header's).
const BASE: u64 = 1 << 20;
const STRIDE: u64 = 4096;

/// Message `[b'r', n, first]`: loads one word from each of `n` lines `first..first + n`
/// (separate, dependent accesses). `[b'c', n]`: one read of `n` consecutive lines at BASE.
/// `[b'w', n]`: stores a word into each of `n` lines, then loads them again.
struct Toucher;

impl Handler for Toucher {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        _conn: usize,
        _recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        let n = u64::from(msg.get(1).copied().unwrap_or(0));
        let first = u64::from(msg.get(2).copied().unwrap_or(0));
        match msg.first() {
            Some(b'r') => {
                for i in first..first + n {
                    region.load_u64(BASE + i * STRIDE)?;
                }
            }
            Some(b'c') => {
                let mut buf = vec![0u8; n as usize * 64];
                region.read(BASE, &mut buf)?;
            }
            Some(b'w') => {
                for i in 0..n {
                    region.store_u64(BASE + i * STRIDE, i + 1)?;
                }
                for i in 0..n {
                    region.load_u64(BASE + i * STRIDE)?;
                }
            }
            _ => {}
        }
        replies.send(b"ok");
        Ok(())
    }
}

/// Runs the messages one after another from one client; returns the server CPU time of each
/// and the node's cache counts. `write_first`: the client WRITEs line 0 before the messages
/// after the first (a NIC write the handler then reads).
fn serve(persistent: bool, msgs: &[&[u8]], write_first: bool) -> (Vec<u64>, LlcStats) {
    let mut sim = Sim::new(SimConfig {
        persistent,
        region_len: 4 << 20,
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(Toucher)).unwrap();
    let ctx = sim.client(0).unwrap();
    let msgs: Vec<Vec<u8>> = msgs.iter().map(|m| m.to_vec()).collect();
    let busy = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let out = busy.clone();
    sim.spawn_with(&ctx, 0, move |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        let mut buf = [0u8; 64];
        for (k, m) in msgs.iter().enumerate() {
            if write_first && k == 1 {
                qp.write(GlobalAddr::new(0, BASE), &[7u8; 8]).await.unwrap();
            }
            let b0 = ctx.server_busy_ns();
            qp.send(m).await.unwrap();
            qp.recv(&mut buf).await.unwrap();
            out.borrow_mut().push(ctx.server_busy_ns() - b0);
        }
    });
    let r = sim.run();
    assert_eq!(r.unfinished, 0);
    let stats = sim.server_llc_stats(0).unwrap();
    let busy = busy.borrow().clone();
    (busy, stats)
}

fn ns(x: f64) -> u64 {
    x.round() as u64
}

#[test]
fn a_handler_touching_more_lines_costs_more() {
    let m = Model::default();
    let (one, s1) = serve(false, &[b"r\x01\x00"], false);
    let (many, s16) = serve(false, &[b"r\x10\x00"], false);
    assert_eq!((s1.lines, s1.misses), (1, 1));
    assert_eq!((s16.lines, s16.misses), (16, 16));
    // Cold cache: every line misses; separate loads do not overlap.
    assert_eq!(
        many[0] - one[0],
        15 * ns(m.server_dram_ns),
        "{many:?} vs {one:?}"
    );
    // A handler that touches nothing costs the fixed base only.
    let (none, s0) = serve(false, &[b"r\x00\x00"], false);
    assert_eq!(s0.lines, 0);
    assert_eq!(one[0] - none[0], ns(m.server_dram_ns));
}

#[test]
fn a_second_touch_of_a_line_is_a_hit() {
    let m = Model::default();
    let (busy, s) = serve(false, &[b"r\x04\x00", b"r\x04\x00", b"r\x04\x02"], false);
    assert_eq!(s.invocations, 3);
    // 4 misses; 4 hits; lines 2, 3 hit and 4, 5 miss.
    assert_eq!((s.lines, s.hits, s.misses), (12, 6, 6));
    let (hit, miss) = (ns(m.server_llc_hit_ns), ns(m.server_dram_ns));
    assert_eq!(busy[0] - busy[1], 4 * (miss - hit), "{busy:?}");
    assert_eq!(busy[2] - busy[1], 2 * (miss - hit), "{busy:?}");
    // Within one message a line counts once: store then load of the same 3 lines.
    let (_, s) = serve(false, &[b"w\x03"], false);
    assert_eq!((s.lines, s.misses), (3, 3));
}

#[test]
fn persistent_misses_cost_more_than_dram_misses() {
    let m = Model::default();
    let msgs: &[&[u8]] = &[b"r\x08\x00"];
    let (dram, _) = serve(false, msgs, false);
    let (nvm, s) = serve(true, msgs, false);
    assert_eq!(s.misses, 8);
    assert!(m.server_nvm_read_ns > m.server_dram_ns);
    assert_eq!(
        nvm[0] - dram[0],
        8 * (ns(m.server_nvm_read_ns) - ns(m.server_dram_ns)),
        "{nvm:?} vs {dram:?}"
    );
}

#[test]
fn one_contiguous_access_overlaps_its_misses() {
    let m = Model::default();
    let (seq, s) = serve(false, &[b"c\x08"], false);
    let (one, _) = serve(false, &[b"c\x01"], false);
    assert_eq!(s.misses, 8);
    let miss = ns(m.server_dram_ns) * 1000;
    let extra = 7 * miss / m.server_mlp as u64;
    assert_eq!((seq[0] - one[0]) * 1000, extra, "{seq:?} vs {one:?}");
    assert!(seq[0] - one[0] < 7 * ns(m.server_dram_ns));
}

#[test]
fn a_line_the_nic_wrote_is_cached_for_the_handler() {
    // The first message starts the node's cache (on line 5); the client then WRITEs line 0,
    // which DDIO places in the cache, and the second message reads it.
    let (_, s) = serve(false, &[b"r\x01\x05", b"r\x01\x00"], true);
    assert_eq!((s.lines, s.hits, s.misses), (2, 1, 1));
    let (_, s) = serve(false, &[b"r\x01\x05", b"r\x01\x00"], false);
    assert_eq!((s.lines, s.hits, s.misses), (2, 0, 2));
}

#[test]
fn the_cache_holds_server_llc_lines() {
    let mut sim = Sim::new(SimConfig {
        region_len: 4 << 20,
        model: {
            let mut m = Model::default();
            m.set("server_llc_lines", "4").unwrap();
            m
        },
        ..SimConfig::default()
    })
    .unwrap();
    sim.set_handler(0, Box::new(Toucher)).unwrap();
    let ctx = sim.client(0).unwrap();
    sim.spawn_with(&ctx, 0, |ctx| async move {
        let qp = ctx.qp(0).unwrap();
        let mut buf = [0u8; 64];
        // 8 lines through a 4-line cache, twice: nothing survives to the second pass.
        for _ in 0..2 {
            qp.send(b"r\x08\x00").await.unwrap();
            qp.recv(&mut buf).await.unwrap();
        }
    });
    sim.run();
    let s = sim.server_llc_stats(0).unwrap();
    assert_eq!((s.lines, s.hits, s.misses), (16, 0, 16));
}
