//! The runtime's tests, on an in-process memory node (soft fabric).
use super::*;
use std::error::Error as _;
use std::task::{Context, Poll, Waker};

fn node(depth: usize, pollers: usize) -> ComputeNode {
    ComputeNode::builder()
        .in_process(
            NodeConfig {
                region_len: 32 << 20,
                ..NodeConfig::default()
            },
            Service::None,
        )
        .pollers(pollers)
        .queue_depth(depth)
        .idle_spins(1000)
        .start()
        .expect("starting a compute node")
}

#[test]
fn blocking_calls_and_a_bounded_scan_with_an_end_key() {
    let n = node(8, 1);
    let idx = n.open(IndexConfig::smart(16)).unwrap();
    for i in 0..100u32 {
        let k = format!("k{i:03}");
        idx.upsert(k.as_bytes(), &i.to_le_bytes()).wait().unwrap();
    }
    assert_eq!(
        idx.get(b"k042").wait().unwrap(),
        Some(42u32.to_le_bytes().to_vec())
    );
    let mut buf = [0u8; 4];
    assert_eq!(idx.get_into(b"k007", &mut buf).wait().unwrap(), Some(4));
    assert_eq!(buf, 7u32.to_le_bytes());
    let mut small = [0u8; 2];
    assert!(matches!(
        idx.get_into(b"k007", &mut small).wait(),
        Err(Error::ValueTooLong { len: 4, max: 2 })
    ));
    assert!(idx.update(b"k001", b"x").wait().unwrap());
    assert!(!idx.update(b"nope", b"x").wait().unwrap());
    assert!(idx.delete(b"k002").wait().unwrap());
    assert_eq!(idx.get(b"k002").wait().unwrap(), None);
    // [k010, k050): 40 keys, one batch or several.
    let keys: Vec<Vec<u8>> = idx
        .scan(b"k010", Some(b"k050"), 1000)
        .map(|r| r.unwrap().0)
        .collect();
    let want: Vec<Vec<u8>> = (10..50).map(|i| format!("k{i:03}").into_bytes()).collect();
    assert_eq!(keys, want);
    // The limit bounds it; from k000 with k002 deleted.
    let keys: Vec<_> = idx.scan(b"k000", None, 5).map(|r| r.unwrap().0).collect();
    assert_eq!(keys, [b"k000", b"k001", b"k003", b"k004", b"k005"]);
    // To the end: 99 keys, in order, across batches.
    let all: Vec<_> = idx
        .scan(b"", None, usize::MAX)
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(all.len(), 99);
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
}

#[test]
fn scan_batches_are_stitched_without_gaps_or_repeats() {
    let n = ComputeNode::builder()
        .in_process_default()
        .max_key(8)
        .max_value(8)
        .start()
        .unwrap();
    n.inner_limits_check();
    let idx = n.open(IndexConfig::smart(8)).unwrap();
    for i in 0..3000u32 {
        idx.upsert(format!("{i:06}").as_bytes(), b"v")
            .wait()
            .unwrap();
    }
    let keys: Vec<_> = idx
        .scan(b"000100", Some(b"002900"), usize::MAX)
        .map(|r| r.unwrap().0)
        .collect();
    let want: Vec<_> = (100..2900u32)
        .map(|i| format!("{i:06}").into_bytes())
        .collect();
    assert_eq!(keys, want);
}

impl ComputeNode {
    /// The scan test needs batches smaller than its key count.
    fn inner_limits_check(&self) {
        assert!(self.inner.limits.scan_batch() < 2800);
    }
}

#[test]
fn errors_wrap_the_index_error_with_a_source() {
    let n = node(4, 1);
    let idx = n.open(IndexConfig::smart(8)).unwrap();
    let e = idx.upsert(b"k", &[0u8; 64]).wait().unwrap_err();
    assert!(matches!(e, Error::Smart(_)), "{e:?}");
    assert!(e.source().is_some());
    let e = idx.get(&[b'a'; 300]).wait().unwrap_err();
    assert!(matches!(e, Error::KeyTooLong { len: 300, max: 256 }));
    let e = n.open(IndexConfig::canrt()).unwrap_err();
    assert!(matches!(e, Error::Service { needs: "canrt", .. }), "{e}");
    let e: Error = CoreList::parse("9-2").unwrap_err().into();
    assert!(e.to_string().contains("9-2") && e.source().is_some());
    let e = ComputeNode::builder().queue_depth(0).start().err().unwrap();
    assert!(matches!(e, Error::Config(_)), "{e}");
}

/// An operation whose future is dropped after it was submitted still runs to its end on
/// the poller (the write lands, no lock stays held: the next write of the key goes
/// through), its slot comes back, and the node counts it as abandoned. One dropped before it
/// got a slot never runs.
#[test]
fn an_operation_dropped_halfway_finishes_and_frees_its_slot() {
    let n = node(4, 1);
    let idx = n.open(IndexConfig::smart(8)).unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let settle = || {
        let t = std::time::Instant::now();
        while n.stats().free_slots < n.stats().slots {
            assert!(
                t.elapsed().as_secs() < 30,
                "slots never came back: {:?}",
                n.stats()
            );
            std::thread::yield_now();
        }
    };
    // A parked poller woken by the submission may preempt this thread right after it
    // submits and finish the op within its first poll (seen at load 19 on 2 cores), so keys
    // go on past 50 until one was dropped pending, up to 2000.
    let mut dropped = 0;
    let mut used = 0u32;
    while used < 50 || (dropped == 0 && used < 2000) {
        let i = used;
        used += 1;
        settle();
        let key = format!("d{i}");
        let mut op = idx.upsert(key.as_bytes(), b"first");
        // Pending: submitted, not finished (a fast poller may finish it within the poll).
        if Pin::new(&mut op).poll(&mut cx).is_pending() {
            assert!(op.is_submitted());
            dropped += 1;
        }
        drop(op);
    }
    settle();
    // An op may still finish between its pending poll and its drop (then its future frees
    // the slot): abandoned ones are at most those dropped pending.
    let abandoned = n.stats().abandoned;
    assert!(
        abandoned >= 1 && abandoned <= dropped,
        "{abandoned} of {dropped}"
    );
    for i in 0..used {
        let key = format!("d{i}");
        assert_eq!(
            idx.get(key.as_bytes()).wait().unwrap(),
            Some(b"first".to_vec())
        );
        idx.upsert(key.as_bytes(), b"second").wait().unwrap();
        assert_eq!(
            idx.get(key.as_bytes()).wait().unwrap(),
            Some(b"second".to_vec())
        );
    }
    // Every slot busy: an op that cannot get one is not submitted, and dropping it is a no-op.
    let mut ops: Vec<_> = (0..4).map(|_| idx.get(b"d0")).collect();
    for op in &mut ops {
        let _ = Pin::new(op).poll(&mut cx);
    }
    let mut late = idx.upsert(b"late", b"x");
    // Submitted if it got a slot: still pending in it, or (a slot freed meanwhile, and the
    // thread descheduled between submitting and looking) already finished.
    let submitted = match Pin::new(&mut late).poll(&mut cx) {
        Poll::Ready(_) => true,
        Poll::Pending => late.is_submitted(),
    };
    drop(late);
    drop(ops);
    settle();
    if !submitted {
        assert_eq!(idx.get(b"late").wait().unwrap(), None);
    }
    let s = n.stats();
    assert_eq!(s.free_slots, s.slots, "{s:?}");
}

/// More application threads than slots: operations wait for a free slot, none is lost.
#[test]
fn threads_share_one_handle_through_few_slots() {
    let n = node(2, 2);
    let idx = n.open(IndexConfig::smart(8)).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let idx = idx.clone();
            s.spawn(move || {
                for i in 0..200u32 {
                    let k = format!("t{t}-{i}");
                    idx.upsert(k.as_bytes(), &i.to_le_bytes()).wait().unwrap();
                    let v = idx.get(k.as_bytes()).wait().unwrap();
                    assert_eq!(v, Some(i.to_le_bytes().to_vec()));
                }
            });
        }
    });
    let s = n.stats();
    assert_eq!(
        s.completed,
        4 * 200 * 2 + 2,
        "every op, and one open per poller"
    );
    assert_eq!(s.free_slots, s.slots);
}

/// The handle and its futures can cross threads.
#[test]
fn handles_and_ops_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>(_: &T) {}
    send_sync::<Index>();
    send_sync::<ComputeNode>();
    let n = node(2, 1);
    let idx = n.open(IndexConfig::smart(8)).unwrap();
    let op = idx.get(b"x");
    send(&op);
    assert_eq!(op.wait().unwrap(), None);
}

use std::future::Future;
use std::pin::Pin;

/// Under tokio's single-threaded runtime, operations of many tasks are awaited at once: the
/// poller's completion wakes each task (tokio polls a task only when it is woken; with the
/// wake removed from `PollerShared::complete`, nothing finishes: already the blocking
/// `open` parks for ever).
#[test]
fn ops_are_awaited_under_a_current_thread_tokio_runtime() {
    let n = node(8, 1);
    let idx = n.open(IndexConfig::smart(8)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..16u32)
            .map(|t| {
                let idx = idx.clone();
                tokio::spawn(async move {
                    for i in 0..50u32 {
                        let k = format!("tok{t}-{i}");
                        idx.upsert(k.as_bytes(), &i.to_le_bytes()).await?;
                        assert_eq!(idx.get(k.as_bytes()).await?, Some(i.to_le_bytes().to_vec()));
                    }
                    Ok::<(), Error>(())
                })
            })
            .collect();
        let all = async {
            for t in tasks {
                t.await.unwrap().unwrap();
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(60), all)
            .await
            .expect("every task finished within 60 s");
    });
}

/// Every poller's handle on one index is opened on the same per-node state: SMART's cache
/// and local table, Sherman's local lock table, CANRT's prefix cache (one `Arc` held by the
/// node, and clones held by each poller's handle), and the index works through it.
#[test]
fn pollers_share_one_node_state_per_index() {
    let n = node(8, 2);
    let smart = n.open(IndexConfig::smart(16)).unwrap();
    let sherman = n.open(IndexConfig::sherman()).unwrap();
    for i in 0..50u32 {
        let k = format!("k{i:03}");
        smart.upsert(k.as_bytes(), &i.to_le_bytes()).wait().unwrap();
        sherman
            .upsert(&(i as u64 + 1).to_be_bytes(), &i.to_le_bytes())
            .wait()
            .unwrap();
    }
    assert_eq!(
        smart.get(b"k007").wait().unwrap(),
        Some(7u32.to_le_bytes().to_vec())
    );
    // The node's own reference, and the same number of clones from each of the 2 pollers'
    // handles (none if the handles had state of their own).
    let shared_by_both = |count: usize| count >= 3 && (count - 1).is_multiple_of(2);
    let states = &n.inner.pollers[0].states;
    match states[0].get() {
        Some(index::NodeState::Smart(s)) => assert!(shared_by_both(Arc::strong_count(s))),
        _ => panic!("SMART's node state is missing"),
    }
    match states[1].get() {
        Some(index::NodeState::Sherman(s)) => assert!(shared_by_both(Arc::strong_count(s))),
        _ => panic!("Sherman's node state is missing"),
    }
    for p in &n.inner.pollers {
        assert!(
            Arc::ptr_eq(&p.states, states),
            "pollers see one state table"
        );
    }
}

/// CHIME and FG+ open the same way as the others; CHIME's handles on every poller share one
/// node state (its hotspot buffer and Sherman's index cache), and both read back what they
/// wrote, alongside Sherman in the same region (each in its own root slot).
#[test]
fn chime_and_fg_plus_open_like_the_others_and_share_node_state() {
    let n = node(8, 2);
    let sherman = n.open(IndexConfig::sherman()).unwrap();
    let chime = n.open(IndexConfig::chime()).unwrap();
    let fg = n.open(IndexConfig::fg_plus()).unwrap();
    sherman.upsert(&1u64.to_be_bytes(), &[9; 8]).wait().unwrap();
    for i in 1..=300u64 {
        chime
            .upsert(&i.to_be_bytes(), &(i * 2).to_le_bytes())
            .wait()
            .unwrap();
        fg.upsert(&i.to_be_bytes(), &(i * 5).to_le_bytes())
            .wait()
            .unwrap();
    }
    for i in (1..=300u64).step_by(13) {
        assert_eq!(
            chime.get(&i.to_be_bytes()).wait().unwrap(),
            Some((i * 2).to_le_bytes().to_vec())
        );
        assert_eq!(
            fg.get(&i.to_be_bytes()).wait().unwrap(),
            Some((i * 5).to_le_bytes().to_vec())
        );
    }
    // Each in its own root slot: Sherman's key 1 is its own, not FG+'s.
    assert_eq!(
        sherman.get(&1u64.to_be_bytes()).wait().unwrap(),
        Some(vec![9; 8])
    );
    assert_eq!(sherman.get(&2u64.to_be_bytes()).wait().unwrap(), None);
    assert!(chime.delete(&7u64.to_be_bytes()).wait().unwrap());
    let keys: Vec<u64> = chime
        .scan(&5u64.to_be_bytes(), Some(&10u64.to_be_bytes()), 100)
        .map(|r| u64::from_be_bytes(r.unwrap().0.try_into().unwrap()))
        .collect();
    assert_eq!(keys, [5, 6, 8, 9]);
    // A key that is not 8 bytes is the index's clear error, not a panic.
    let e = chime.get(b"abc").wait().unwrap_err();
    assert!(e.to_string().contains("key"), "{e}");
    let shared_by_both = |count: usize| count >= 3 && (count - 1).is_multiple_of(2);
    match n.inner.pollers[0].states[1].get() {
        Some(index::NodeState::Chime(s)) => assert!(shared_by_both(Arc::strong_count(s))),
        _ => panic!("CHIME's node state is missing"),
    }
}

fn catfish_node(pollers: usize, depth: usize) -> ComputeNode {
    ComputeNode::builder()
        .in_process(
            NodeConfig {
                region_len: 32 << 20,
                ..NodeConfig::default()
            },
            Service::Catfish,
        )
        .pollers(pollers)
        .queue_depth(depth)
        .idle_spins(1000)
        .start()
        .expect("starting a compute node with the catfish service")
}

fn square(i: u64) -> Rect {
    let (x, y) = ((i % 40) as i32 * 100, (i / 40) as i32 * 100);
    Rect {
        min_x: x,
        min_y: y,
        max_x: x + 50,
        max_y: y + 50,
    }
}

/// Catfish through the node, in each search mode: threads sharing one handle insert
/// disjoint squares on 2 pollers (each poller's one client taken in turn by its
/// coroutines), then a search finds exactly the squares of a window, the limit bounds what
/// comes back while the count says how many matched, and a delete removes one entry.
#[test]
fn catfish_inserts_from_threads_and_searches_a_window() {
    for mode in [
        SearchMode::Messaging,
        SearchMode::Offload,
        SearchMode::Adaptive,
    ] {
        catfish_in_mode(mode);
    }
}

fn catfish_in_mode(mode: SearchMode) {
    let n = catfish_node(2, 8);
    assert_eq!(n.service(), "catfish");
    let cfg = CatfishConfig::default().with_search(mode);
    let tree = n.open_spatial(SpatialConfig::Catfish(cfg)).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let tree = tree.clone();
            s.spawn(move || {
                for i in (t..400).step_by(4) {
                    tree.insert(square(i), i).wait().unwrap();
                }
            });
        }
    });
    // Squares 0..400 on a 40-wide grid of 100-unit cells: the window [0, 450] x [0, 250]
    // touches columns 0..=4 of rows 0..=2.
    let window = Rect {
        min_x: 0,
        min_y: 0,
        max_x: 450,
        max_y: 250,
    };
    let mut want: Vec<u64> = (0..3)
        .flat_map(|r| (0..5).map(move |c| r * 40 + c))
        .collect();
    want.sort_unstable();
    let mut got: Vec<u64> = tree
        .search(window, 100)
        .wait()
        .unwrap()
        .iter()
        .map(|e| e.ptr)
        .collect();
    got.sort_unstable();
    assert_eq!(got, want, "{mode:?}");
    let mut out = Vec::new();
    assert_eq!(tree.search_into(window, 4, &mut out).wait().unwrap(), 15);
    assert_eq!(out.len(), 4);
    assert!(
        out.iter()
            .all(|e| want.contains(&e.ptr) && e.rect == square(e.ptr))
    );
    assert!(tree.delete(square(41), 41).wait().unwrap());
    assert!(!tree.delete(square(41), 41).wait().unwrap());
    assert_eq!(tree.search_into(window, 100, &mut out).wait().unwrap(), 14);
    assert!(!out.iter().any(|e| e.ptr == 41));
    // The same handle comes back from a second open; a bad rectangle is a clear error.
    let again = n.open_spatial(SpatialConfig::catfish()).unwrap();
    assert_eq!(again.search(window, 100).wait().unwrap().len(), 14);
    let bad = Rect {
        min_x: 10,
        min_y: 0,
        max_x: 0,
        max_y: 0,
    };
    assert!(matches!(tree.insert(bad, 1).wait(), Err(Error::BadRect(_))));
    let s = n.stats();
    assert_eq!(s.free_slots, s.slots, "{s:?}");
}

/// Catfish needs its service on the memory node; SMART's index has no spatial operations.
#[test]
fn catfish_needs_its_service() {
    let n = node(4, 1);
    let e = n.open_spatial(SpatialConfig::catfish()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Service {
                needs: "catfish",
                ..
            }
        ),
        "{e}"
    );
}
