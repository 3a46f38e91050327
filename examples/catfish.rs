//! Catfish's R-tree through the compute node: an in-process memory node runs the `catfish`
//! service (fast messaging, heartbeats), two pollers each run one Catfish client, and
//! application threads share one `Spatial` handle. Writer threads insert small squares of a
//! grid, each with its cell number as value, while reader threads search windows; once all
//! are in, every window's hits are checked against the grid (exactly the squares it touches)
//! and one square is deleted. Exits non-zero on a wrong answer, and prints operations/s.
//!
//! `cargo run --release --example catfish [-- --squares N]`
use remora::node::{ComputeNode, Entry, NodeConfig, Rect, Service, Spatial, SpatialConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Cells per row of the grid; each cell is 100 units wide, its square 60.
const ROW: u64 = 100;

fn square(i: u64) -> Rect {
    let (x, y) = ((i % ROW) as i32 * 100, (i / ROW) as i32 * 100);
    Rect {
        min_x: x,
        min_y: y,
        max_x: x + 60,
        max_y: y + 60,
    }
}

/// The window of cell columns `c0..c0+w` and rows `r0..r0+h` (covering their squares).
fn window(c0: u64, r0: u64, w: u64, h: u64) -> Rect {
    Rect {
        min_x: c0 as i32 * 100,
        min_y: r0 as i32 * 100,
        max_x: (c0 + w) as i32 * 100 - 1,
        max_y: (r0 + h) as i32 * 100 - 1,
    }
}

/// The cells of that window that hold one of the first `n` squares.
fn cells(c0: u64, r0: u64, w: u64, h: u64, n: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (r0..r0 + h)
        .flat_map(|r| (c0..c0 + w).map(move |c| r * ROW + c))
        .filter(|&i| i < n)
        .collect();
    v.sort_unstable();
    v
}

fn ids(hits: &[Entry]) -> Vec<u64> {
    let mut v: Vec<u64> = hits.iter().map(|e| e.ptr).collect();
    v.sort_unstable();
    v
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut squares = 4000u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--squares" => squares = args.next().ok_or("--squares needs a value")?.parse()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let node = ComputeNode::builder()
        .in_process(NodeConfig::default(), Service::Catfish)
        .pollers(2)
        .start()?;
    let tree: Spatial = node.open_spatial(SpatialConfig::catfish())?;
    let writers = 2u64;
    let t0 = Instant::now();
    let done = AtomicBool::new(false);
    let searches = std::thread::scope(|s| -> Result<u64, String> {
        let mut ws = Vec::new();
        for w in 0..writers {
            let tree = tree.clone();
            ws.push(s.spawn(move || -> Result<(), String> {
                for i in (w..squares).step_by(writers as usize) {
                    tree.insert(square(i), i)
                        .wait()
                        .map_err(|e| format!("insert {i}: {e}"))?;
                }
                Ok(())
            }));
        }
        // Readers search while the writers insert: every hit must be a real square that
        // lies in the window (which squares are in yet is the writers' business).
        let reader = {
            let (tree, done) = (tree.clone(), &done);
            s.spawn(move || -> Result<u64, String> {
                let mut hits = Vec::new();
                let mut n = 0u64;
                while !done.load(Ordering::Acquire) {
                    let (c0, r0) = (n * 7 % (ROW - 5), n * 3 % (squares / ROW).max(1));
                    let win = window(c0, r0, 5, 2);
                    tree.search_into(win, 1000, &mut hits)
                        .wait()
                        .map_err(|e| format!("search: {e}"))?;
                    for e in &hits {
                        if e.ptr >= squares || e.rect != square(e.ptr) || !e.rect.intersects(&win) {
                            return Err(format!("search {win:?} returned {e:?}"));
                        }
                    }
                    n += 1;
                }
                Ok(n)
            })
        };
        for w in ws {
            w.join().map_err(|_| "a writer panicked")??;
        }
        done.store(true, Ordering::Release);
        reader
            .join()
            .map_err(|_| "the reader panicked".to_string())?
    })?;
    let load = t0.elapsed().as_secs_f64();
    // Every window of 5 x 2 cells, from two threads: exactly its squares.
    let t1 = Instant::now();
    let rows = squares.div_ceil(ROW);
    let checked = std::thread::scope(|s| -> Result<u64, String> {
        let hs: Vec<_> = (0..2u64)
            .map(|t| {
                let tree = tree.clone();
                s.spawn(move || -> Result<u64, String> {
                    let mut k = 0;
                    for r0 in (0..rows).filter(|r| r % 2 == t) {
                        for c0 in 0..ROW - 4 {
                            let hits = tree
                                .search(window(c0, r0, 5, 2), 100)
                                .wait()
                                .map_err(|e| format!("search: {e}"))?;
                            if ids(&hits) != cells(c0, r0, 5, 2, squares) {
                                return Err(format!("window at cell ({c0}, {r0}): {hits:?}"));
                            }
                            k += 1;
                        }
                    }
                    Ok(k)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().map_err(|_| "a searcher panicked".to_string())?)
            .sum()
    })?;
    let check = t1.elapsed().as_secs_f64();
    // A delete, and the window without it.
    if !tree.delete(square(ROW + 1), ROW + 1).wait()? {
        return Err("the square of cell 101 was not there to delete".into());
    }
    let after = ids(&tree.search(window(0, 0, 5, 2), 100).wait()?);
    let mut want = cells(0, 0, 5, 2, squares);
    want.retain(|&i| i != ROW + 1);
    if after != want {
        return Err(format!("after the delete: {after:?}, want {want:?}").into());
    }
    println!(
        "catfish: {squares} squares inserted by {writers} threads in {load:.2} s \
         ({:.0} inserts/s) beside {searches} concurrent searches; {checked} windows checked \
         in {check:.2} s ({:.0} searches/s); 1 delete",
        squares as f64 / load,
        checked as f64 / check
    );
    Ok(())
}
