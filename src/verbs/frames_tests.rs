//! Coroutine frame memory sized at the spawn: 256 coroutines whose futures hold 32 KiB
//! each (8 MiB, twice the endpoint's first frame memory, as 256 SMART lookups) write, READ
//! and FAA in place, never bounced; a spawn nested in live frames that does not fit falls
//! back to the heap, its READs bounced but correct.
use crate::verbs::{FakeEndpoint, FakeNode};
use remora_core::fabric::{Endpoint, QueuePair};
use remora_core::server::Echo;
use remora_layouts::GlobalAddr;
use remora_poller::executor::run_coroutines;
use remora_poller::frames;

const CO: usize = 256;
const FRAME: usize = 32 << 10;

fn endpoint() -> FakeEndpoint {
    let n = FakeNode::new(0, 4 << 20, 1 << 20, 64 << 10, Box::new(Echo)).unwrap();
    FakeEndpoint::connect(&[n]).unwrap()
}

#[test]
fn many_large_coroutines_are_placed_in_registered_frames() {
    let ep = endpoint();
    let qp = ep.qp(0).unwrap();
    let coros: Vec<_> = (0..CO)
        .map(|c| async move {
            let mut frame = [0u8; FRAME];
            let at = GlobalAddr::new(0, 8192 + c as u64 * 512);
            let (out, back) = frame.split_at_mut(512);
            out.fill(c as u8);
            qp.write(at, out).await.unwrap();
            qp.read(at, &mut back[..512]).await.unwrap();
            assert_eq!(back[..512], [c as u8; 512], "coroutine {c}");
            qp.faa(GlobalAddr::new(0, 4096), 1).await.unwrap();
        })
        .collect();
    let need = std::mem::size_of_val(&coros[0]) * CO;
    assert!(
        need > 4 << 20,
        "the test must outgrow the first frame memory: {need}"
    );
    run_coroutines(coros);
    let d = ep.stats();
    assert_eq!(d.bounced(), 0, "{d}");
    assert!(d.in_place >= (CO * 1024) as u64, "{d}");
    assert!(frames::installed_span().is_some_and(|(_, len)| len >= need));
    // Every FAA landed.
    let mut w = [0u8; 8];
    let done: Vec<_> = vec![async { qp.read(GlobalAddr::new(0, 4096), &mut w).await }];
    run_coroutines(done).pop().unwrap().unwrap();
    assert_eq!(u64::from_le_bytes(w), CO as u64);
}

#[test]
fn a_nested_spawn_that_does_not_fit_falls_back_to_the_heap_and_bounces() {
    let ep = endpoint();
    let qp = ep.qp(0).unwrap();
    let at = GlobalAddr::new(0, 8192);
    let outer = vec![async {
        // The outer frame lives while the inner spawn is placed: the memory cannot be
        // replaced, and 8 MiB do not fit in what is left.
        let inner: Vec<_> = (0..CO)
            .map(|c| async move {
                let mut frame = [0u8; FRAME];
                qp.read(at, &mut frame[..64]).await.unwrap();
                frame[c % 64]
            })
            .collect();
        run_coroutines(inner)
    }];
    let out = run_coroutines(outer).pop().unwrap();
    assert_eq!(out.len(), CO);
    let d = ep.stats();
    assert_eq!(d.bounced_read, (CO * 64) as u64, "{d}");
}
