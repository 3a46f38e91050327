//! CHIME's merges (`core/src/chime/merge.rs`) with the merger killed at every point of its
//! merge (issue 26): a client deletes keys until a leaf is left with at most
//! `MERGE_AT` keys and merges it into its left neighbour; its queue pair then stops inside
//! the merge's doorbell (the merge record, both redo pointers, the left leaf's new image, the
//! retired leaf's, the cleared pointer, the unlock): the WRITEs before the kill point land
//! whole, the one at it only in part (a seeded subset of its changed words, as a process
//! killed mid-copy leaves it), nothing after; or the doorbell lands whole and the client dies
//! at its next one (the left leaf's unlock). Its locks stay held. A survivor (another client)
//! then reads every key back (each live key its value, each deleted key absent), scans the
//! whole range (exactly the live keys, in order: a merge half done would show a key twice or
//! lose it), rewrites every key and reads them all back, through the dead merger's locks
//! (taken over after their lease, the merge finished by the takeover, `redo.rs`).
//!
//! The same campaign with the survivor's merge completion turned off
//! (`Mutation::no_merge_completion`) must fail at some kill point: the completion is what
//! makes the other points pass.
use remora_core::block_on::block_on;
use remora_core::chime::{Chime, ChimeConfig, ChimeError, Mutation};
use remora_core::fabric::{FabricError, Op, QueuePair, SegmentOrder};
use remora_core::index::KvIndex;
use remora_layouts::chime::LEAF_LEN;
use remora_poller::soft::{NodeConfig, SoftEndpoint, SoftMemoryNode, SoftQp};
use std::cell::Cell;

#[path = "common/chime_small.rs"]
mod chime_small;
#[path = "common/hooked.rs"]
mod hooked;
use chime_small::k;
use hooked::{HookedEp, PostHook};

/// Keys loaded (8-byte integers 0, 1000, 2000, ...: leaves hold contiguous runs).
const KEYS: u64 = 300;
/// Bytes of a merge record (`redo.rs`: 32 bytes of header, both leaf images).
const MERGE_RECORD: usize = 32 + 2 * LEAF_LEN;

fn cfg(no_completion: bool) -> ChimeConfig {
    chime_small::merging(
        20_000_000,
        500_000_000,
        Mutation {
            no_merge_completion: no_completion,
            ..Mutation::default()
        },
    )
}

/// Where the merger stops: `at` indexes the merge doorbell's work requests (the one torn;
/// its length: the whole doorbell lands and the next one is never posted).
struct Kill {
    at: usize,
    seed: u64,
    dead: Cell<bool>,
    merges_seen: Cell<u32>,
}

impl Kill {
    async fn tear(&self, qp: &SoftQp, ops: &mut [Op<'_>]) -> Result<(), FabricError> {
        if self.at >= ops.len() {
            return qp.post(ops).await;
        }
        let mut part: Vec<Op<'_>> = ops[..self.at]
            .iter()
            .filter_map(|op| match *op {
                Op::Write { remote, local } => Some(Op::Write { remote, local }),
                _ => None,
            })
            .collect();
        if let Op::Write { remote, local: new } = ops[self.at] {
            let mut old = vec![0u8; new.len()];
            qp.read(remote, &mut old).await?;
            let differ: Vec<usize> = (0..new.len() / 8)
                .filter(|&i| new[i * 8..i * 8 + 8] != old[i * 8..i * 8 + 8])
                .collect();
            if !differ.is_empty() {
                let (start, stride) = SegmentOrder::permutation(differ.len(), self.seed);
                let n = (self.seed as usize % differ.len()).max(1).min(differ.len());
                for j in 0..n {
                    let i = differ[(start + j * stride) % differ.len()];
                    part.push(Op::Write {
                        remote: remote.add(i as u64 * 8),
                        local: &new[i * 8..i * 8 + 8],
                    });
                }
            }
        }
        qp.post(&mut part).await
    }
}

impl PostHook<SoftQp> for &Kill {
    async fn post<'a, 'b>(
        &'a self,
        qp: &'a SoftQp,
        ops: &'a mut [Op<'b>],
    ) -> Result<(), FabricError> {
        let died = || FabricError::RetryExceeded { node: qp.peer() };
        if self.dead.get() {
            return Err(died());
        }
        let merge = ops
            .iter()
            .any(|op| matches!(op, Op::Write { local, .. } if local.len() == MERGE_RECORD));
        if merge {
            self.merges_seen.set(self.merges_seen.get() + 1);
            self.dead.set(true);
            self.tear(qp, ops).await?;
            return Err(died());
        }
        qp.post(ops).await
    }
}

async fn value(t: &Chime<'_, SoftEndpoint>, i: u64) -> Result<Option<u64>, ChimeError> {
    let mut out = [0u8; 8];
    Ok(t.get(&k(i), &mut out)
        .await?
        .map(|_| u64::from_le_bytes(out)))
}

/// One kill point: `Err` says what the survivor found wrong.
fn trial(kill: &Kill, no_completion: bool) -> Result<(), String> {
    let node = SoftMemoryNode::create(NodeConfig {
        node_id: 0,
        region_len: 16 << 20,
        chunk_size: 256 << 10,
        ..NodeConfig::default()
    })
    .unwrap();
    let (ea, eb) = (node.endpoint().unwrap(), node.endpoint().unwrap());
    let hooked = HookedEp::new(&ea, |_| kill);
    block_on(async {
        let a = Chime::create(&hooked, cfg(false)).await.unwrap();
        for i in 0..KEYS {
            a.upsert(&k(i), &i.to_le_bytes()).await.unwrap();
        }
        // Deletes from the middle on, until one fails (the merger died in it: the delete
        // itself landed before its merge began).
        let mut live: Vec<bool> = vec![true; KEYS as usize];
        for i in KEYS / 3..KEYS {
            let r = a.delete(&k(i)).await;
            live[i as usize] = false;
            if r.is_err() {
                break;
            }
            assert!(r.unwrap(), "key {i}");
        }
        assert_eq!(kill.merges_seen.get(), 1, "no merge began");
        let b = Chime::create(&eb, cfg(no_completion)).await.unwrap();
        for i in 0..KEYS {
            let want = live[i as usize].then_some(i);
            let got = value(&b, i).await.map_err(|e| format!("get {i}: {e:?}"))?;
            if got != want {
                return Err(format!("key {i}: {got:?}, not {want:?}"));
            }
        }
        let mut seen = Vec::new();
        b.scan(&k(0), KEYS as usize + 10, &mut |key, v| {
            let key = u64::from_be_bytes(key.try_into().unwrap()) / 1000;
            seen.push((key, u64::from_le_bytes(v.try_into().unwrap())));
        })
        .await
        .map_err(|e| format!("scan: {e:?}"))?;
        let want: Vec<(u64, u64)> = (0..KEYS)
            .filter(|&i| live[i as usize])
            .map(|i| (i, i))
            .collect();
        if seen != want {
            return Err(format!("scan: {} keys, not {}", seen.len(), want.len()));
        }
        for i in 0..KEYS {
            b.upsert(&k(i), &(i + 7).to_le_bytes())
                .await
                .map_err(|e| format!("upsert {i}: {e:?}"))?;
        }
        for i in 0..KEYS {
            let got = value(&b, i).await.map_err(|e| format!("get {i}: {e:?}"))?;
            if got != Some(i + 7) {
                return Err(format!("key {i} after the rewrite: {got:?}"));
            }
        }
        Ok(())
    })
}

/// The kill points: every work request of the merge doorbell (the merge record, two redo
/// pointers, two leaf images, the cleared pointer, the unlock) torn with several seeds, and
/// the doorbell whole with the merger dead at its next one: 50 points.
fn points() -> impl Iterator<Item = Kill> {
    (0..49u64)
        .map(|n| (n as usize % 7, n / 7 + 1))
        .chain(core::iter::once((usize::MAX, 0)))
        .map(|(at, seed)| Kill {
            at,
            seed: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            dead: Cell::new(false),
            merges_seen: Cell::new(0),
        })
}

#[test]
fn a_merge_killed_anywhere_is_finished_or_undone() {
    for kill in points() {
        if let Err(why) = trial(&kill, false) {
            panic!("killed at request {} (seed {}): {why}", kill.at, kill.seed);
        }
    }
}

#[test]
fn without_merge_completion_some_kill_point_loses_or_tears_keys() {
    let failed: Vec<String> = points()
        .filter_map(|kill| {
            trial(&kill, true)
                .err()
                .map(|w| format!("{}: {w}", kill.at))
        })
        .collect();
    eprintln!(
        "{} of 50 kill points fail without completion: {failed:?}",
        failed.len()
    );
    assert!(
        !failed.is_empty(),
        "every kill point passes without the merge completion"
    );
}
