//! The leaf's rear lock as an owned lock with a lease ([`crate::lease`]), and the redo copy
//! that lets whoever takes a lock over from a dead holder repair a half-written leaf.
//!
//! - **Lock word**: [`owner_word`]`(client, tag)`. The tag names one slot of the holder's
//!   *redo ring* on the leaf's memory node: `tag = gen << 28 | slot_offset / 64` (the ring
//!   cycles through its slots and `gen` counts, so consecutive acquisitions write different
//!   words and a waiter never mistakes a busy live holder for a stuck one).
//! - **Redo copy**: the write-back doorbell is `[WRITE new image -> redo slot, WRITE leaf
//!   body, WRITE unlock]`. Per-queue-pair order makes the redo copy complete before any word
//!   of the leaf changes, so a leaf found torn under a dead holder's lock has a whole new
//!   image in the slot its lock word names.
//! - **Takeover**: a waiter that sees the same word for a lease fences the holder and CASes
//!   the word to its own. The leaf it read in the same doorbell is then either whole (the
//!   dead holder's write-back landed completely, or not at all: the old or the new value, and
//!   either is a linearizable outcome of an operation whose caller never saw it return) or
//!   torn (the write-back was landing): then the redo image verifies (CRC, key, size) and is
//!   the leaf's content — the in-flight write took effect. A torn leaf whose redo does not
//!   verify is reported corrupt.
use super::config::SmartError;
use super::handover::Turn;
use super::remote::check_leaf;
use super::{Smart, bump};
use crate::fabric::{Endpoint, FabricError, Op, QueuePair};
use crate::lease::{LeaseConfig, Verdict, Waiter, holder, owner_word};
use core::cell::Cell;
use remora_layouts::GlobalAddr;
use remora_layouts::smart::{LEAF_STATUS_OFFSET, MAX_KEY_LEN, leaf_lock_offset};

/// Redo slots per handle and memory node (at most this many in-place writes of one handle
/// to one memory node are in flight at once).
pub(crate) const REDO_SLOTS: usize = 16;
const OFF_BITS: u32 = 28;

/// One handle's redo slots on one memory node.
pub(crate) struct RedoRing {
    pub base: GlobalAddr,
    pub slot_bytes: usize,
    busy: Cell<u32>,
    next: Cell<u32>,
}

impl RedoRing {
    pub fn new(base: GlobalAddr, slot_bytes: usize) -> Result<RedoRing, SmartError> {
        let end = base.offset() + (REDO_SLOTS * slot_bytes) as u64;
        if end / 64 >= 1 << OFF_BITS
            || !base.offset().is_multiple_of(64)
            || !slot_bytes.is_multiple_of(64)
        {
            return Err(SmartError::Config(
                "redo ring beyond 16 GiB into the region: lock tags cannot name it",
            ));
        }
        Ok(RedoRing {
            base,
            slot_bytes,
            busy: Cell::new(0),
            next: Cell::new(0),
        })
    }
}

/// A redo slot held by one in-place write; freed on drop.
pub(crate) struct RedoSlot<'a> {
    ring: &'a RedoRing,
    bit: u32,
    pub at: GlobalAddr,
    pub tag: u32,
}

impl Drop for RedoSlot<'_> {
    fn drop(&mut self) {
        self.ring.busy.set(self.ring.busy.get() & !(1 << self.bit));
    }
}

/// The redo slot a lock word names, on the leaf's memory node.
pub(crate) fn redo_of(word: u64, leaf: GlobalAddr) -> GlobalAddr {
    let off = (word as u32 & ((1 << OFF_BITS) - 1)) as u64 * 64;
    GlobalAddr::new(leaf.node(), off)
}

/// A leaf lock held by [`Smart::lock_leaf`]: how it was had, and the compute node's local
/// turn on it (with the leaf hand-over).
pub(crate) struct LeafHold<'a> {
    pub got: Got,
    pub turn: Option<Turn<'a>>,
}

/// How a leaf lock was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Got {
    Clean,
    /// Taken over from a dead holder whose lock word was this.
    TookOver(u64),
}

impl<'e, E: Endpoint> Smart<'e, E> {
    /// A free redo slot on `node` (waits while all are taken by this handle's coroutines).
    pub(crate) async fn redo_slot(
        &self,
        node: remora_layouts::NodeId,
    ) -> Result<RedoSlot<'_>, SmartError> {
        let ix = self
            .ep
            .nodes()
            .iter()
            .position(|n| *n == node)
            .ok_or(SmartError::Fabric(FabricError::UnknownNode { node }))?;
        let ring = self.redo.get(ix).ok_or(SmartError::Config(
            "no redo ring: in-place leaves are off for this handle",
        ))?;
        let mut pace = None;
        loop {
            let busy = ring.busy.get();
            let start = ring.next.get();
            for k in 0..REDO_SLOTS as u32 {
                let n = start.wrapping_add(k);
                let bit = n % REDO_SLOTS as u32;
                if busy & (1 << bit) == 0 {
                    ring.busy.set(busy | 1 << bit);
                    ring.next.set(n.wrapping_add(1));
                    let at = ring.base.add((bit as usize * ring.slot_bytes) as u64);
                    let epoch = (n / REDO_SLOTS as u32) & 0xF;
                    let tag = epoch << OFF_BITS | (at.offset() / 64) as u32;
                    return Ok(RedoSlot { ring, bit, at, tag });
                }
            }
            if !self.back_off(&mut pace).await {
                return Err(SmartError::Contention {
                    what: "every redo slot of this handle stayed in use",
                    tries: REDO_SLOTS as u32,
                });
            }
        }
    }

    /// Takes the lock of the `bytes`-byte leaf at `leaf` for `mine`, reading the leaf into
    /// `img` in the same doorbell (after the lock CAS). Waits with back-off; takes over from
    /// a holder whose word stayed the same for a lease (fencing it first). `None`: the
    /// attempt that found the leaf (at `t0`) grew too old to touch it (`reclaim.rs`).
    ///
    /// With the on-chip lock table for this step (`Smart::leaf_chip_lock`) the lock is the
    /// leaf's hashed bit in device memory instead (never taken over: always [`Got::Clean`]).
    ///
    /// With the leaf hand-over (`SmartConfig::leaf_handover`) the compute node's clients
    /// first queue for a local turn on the lock; a turn handed the lock by the previous holder
    /// reads the leaf without a CAS (on-chip bit) or re-stamps the lock word with its own (CAS
    /// from the handed word, same doorbell: a failed re-stamp, the word taken over meanwhile,
    /// falls back to an ordinary acquisition).
    pub(crate) async fn lock_leaf(
        &self,
        leaf: GlobalAddr,
        bytes: usize,
        mine: u64,
        img: &mut [u8],
        t0: u64,
    ) -> Result<Option<LeafHold<'_>>, SmartError> {
        let chip = self.leaf_chip_lock(leaf);
        let lock_at = leaf.add(leaf_lock_offset(bytes) as u64);
        let qp = self.qp(leaf)?;
        // Keyed by the leaf (on-chip bit) or its lock word (whose address a stale
        // hand-over's unlock needs).
        let (turn, mut expected) = self
            .local_turn(
                &self.node.leaf_handover,
                if chip.is_some() { leaf } else { lock_at },
                mine,
                "leaf lock (this compute node's turn)",
                lock_at,
                chip.is_some(),
                |word| word,
            )
            .await?;
        if let Some(c) = chip {
            if expected != 0 {
                if self.stale(t0) {
                    return Ok(None);
                }
                bump(&self.stats.handovers);
                qp.read(leaf, &mut img[..bytes]).await?;
                return Ok(Some(LeafHold {
                    got: Got::Clean,
                    turn,
                }));
            }
            let reads = &mut [(leaf, &mut img[..bytes])];
            let got = self
                .lock_chip(c, "leaf lock (on-chip bit)", reads, Some(t0))
                .await?;
            return Ok(got.then_some(LeafHold {
                got: Got::Clean,
                turn,
            }));
        }
        let mut handed = expected != 0;
        let mut waiter: Option<Waiter> = None;
        loop {
            if self.stale(t0) {
                return Ok(None);
            }
            let mut old = 0u64;
            qp.post(&mut [
                Op::Cas {
                    remote: lock_at,
                    compare: expected,
                    swap: mine,
                    old: &mut old,
                },
                Op::Read {
                    remote: leaf,
                    local: &mut img[..bytes],
                },
            ])
            .await?;
            if old == expected {
                if let Some(w) = &waiter {
                    bump(&self.stats.leaf_lock_waited);
                    let waited = self.ep.now_ns().saturating_sub(w.started());
                    let total = &self.stats.leaf_lock_wait_ns;
                    total.set(total.get().saturating_add(waited));
                }
                let got = if expected == 0 {
                    Got::Clean
                } else if handed {
                    bump(&self.stats.handovers);
                    Got::Clean
                } else {
                    bump(&self.stats.takeovers);
                    Got::TookOver(expected)
                };
                return Ok(Some(LeafHold { got, turn }));
            }
            handed = false;
            bump(&self.stats.lock_waits);
            expected = self
                .lock_wait(&mut waiter, old, "leaf lock", lock_at)
                .await?;
        }
    }

    /// Releases a leaf lock taken by [`Self::lock_leaf`] without writing the leaf: a WRITE
    /// of 0 to the leaf's lock word at `lock_at`, or the masked CAS that clears its on-chip
    /// bit; then ends the local turn (nothing handed over).
    pub(crate) async fn unlock_leaf(
        &self,
        leaf: GlobalAddr,
        lock_at: GlobalAddr,
        turn: Option<Turn<'_>>,
    ) -> Result<(), SmartError> {
        let r = match self.leaf_chip_lock(leaf) {
            Some(c) => self.unlock_chip(c).await,
            None => self.write(lock_at, &0u64.to_le_bytes()).await,
        };
        if let Some(t) = turn {
            t.finish(false).await;
        }
        r
    }

    /// The bounds of a lock wait that starts at `now`: spinning
    /// ([`super::SmartConfig::spin_locks`]) or backing off.
    pub(crate) fn lock_lease(&self, now: u64) -> LeaseConfig {
        if self.cfg.spin_locks {
            self.cfg.lease.spinning(now)
        } else {
            self.cfg.lease
        }
    }

    /// One failed CAS on the remote lock word at `lock_at`, which held `old`: backs off, or
    /// fences a holder whose word stayed for a lease (then returns that word, for the next
    /// CAS to take the lock from), or gives up past the deadline. Returns the word the next
    /// CAS expects.
    pub(crate) async fn lock_wait(
        &self,
        waiter: &mut Option<Waiter>,
        old: u64,
        what: &'static str,
        lock_at: GlobalAddr,
    ) -> Result<u64, SmartError> {
        let now = self.ep.now_ns();
        // The lease counts only time watched (`crate::lease`, "Stalls"): a waiter stopped
        // with its process fences no live holder for it.
        let w = waiter.get_or_insert_with(|| Waiter::new(self.lock_lease(now), now).watching());
        match w.observe(old, now) {
            Verdict::Wait(ns) => self.ep.pause(ns).await,
            Verdict::Expired { word } => {
                if self.fence_holder(what, lock_at, word).await? {
                    return Ok(word);
                }
            }
            Verdict::GiveUp { word, waited_ns } => {
                return Err(SmartError::Held {
                    what,
                    at: lock_at,
                    word,
                    holder: holder(word),
                    waited_ns,
                });
            }
        }
        Ok(0)
    }

    /// Fences the holder named by `word` (a lock at `at` unchanged for a lease). False: the
    /// holder is this client itself (another coroutine or handle of this thread, stalled with
    /// it), which is never fenced: keep waiting.
    pub(crate) async fn fence_holder(
        &self,
        what: &'static str,
        at: GlobalAddr,
        word: u64,
    ) -> Result<bool, SmartError> {
        let me = self.ep.client_id();
        if me != 0 && holder(word) == me {
            return Ok(false);
        }
        match self.ep.fence(at.node(), holder(word)).await {
            Ok(()) => Ok(true),
            Err(FabricError::Unsupported { .. }) => Err(SmartError::Held {
                what,
                at,
                word,
                holder: holder(word),
                waited_ns: self.cfg.lease.lease_ns,
            }),
            Err(e) => Err(SmartError::Fabric(e)),
        }
    }

    /// After a takeover from `dead` (its lock word): makes `img` (the leaf as read under our
    /// lock) whole. Returns whether it had to be rebuilt from the dead holder's redo copy
    /// (then the caller must write it back before releasing).
    ///
    /// The redo copy is read into `img` itself, after what the repair keeps of the torn image
    /// (its reverse pointer and our lock word, and its key to check the copy against) is set
    /// aside: no second buffer of the largest leaf, which would sit in every lookup's frame
    /// (a torn-leaf repair is awaited inside the lookup's leaf read).
    pub(crate) async fn repair_taken_leaf(
        &self,
        leaf: GlobalAddr,
        img: &mut [u8],
        dead: u64,
    ) -> Result<bool, SmartError> {
        if check_leaf(img).is_ok() {
            return Ok(false);
        }
        let bytes = img.len();
        if bytes < LEAF_STATUS_OFFSET + 8 {
            return Err(SmartError::Corrupt {
                what: "leaf torn under a dead holder's lock is shorter than its header",
                err: remora_layouts::LayoutError::Inconsistent {
                    what: "torn leaf too short",
                },
            });
        }
        let mut head = [0u8; LEAF_STATUS_OFFSET];
        head.copy_from_slice(&img[..LEAF_STATUS_OFFSET]);
        let mut tail = [0u8; 8];
        tail.copy_from_slice(&img[bytes - 8..]);
        // The torn image's key, if it decodes (the key never changes in place, so even a
        // torn image's key words are whole); a key longer than any leaf's matches no copy.
        let mut key = [0u8; MAX_KEY_LEN];
        let torn_key = remora_layouts::smart::LeafView::decode(img).ok().map(|v| {
            match key.get_mut(..v.key.len()) {
                Some(k) => {
                    k.copy_from_slice(v.key);
                    Some(v.key.len())
                }
                None => None,
            }
        });
        self.read(redo_of(dead, leaf), img).await?;
        let key_ok = match check_leaf(img) {
            Ok(r) => match torn_key {
                None => true,
                Some(Some(n)) => key[..n] == *r.key,
                Some(None) => false,
            },
            Err(_) => false,
        };
        if !key_ok {
            return Err(SmartError::Corrupt {
                what: "leaf torn under a dead holder's lock, and its redo copy does not verify",
                err: remora_layouts::LayoutError::Inconsistent {
                    what: "torn leaf without a redo image",
                },
            });
        }
        // Keep the leaf's own reverse pointer and our lock word; the rest is the redo's.
        img[..LEAF_STATUS_OFFSET].copy_from_slice(&head);
        img[bytes - 8..].copy_from_slice(&tail);
        bump(&self.stats.repairs);
        Ok(true)
    }

    /// A reader that keeps finding the leaf at `leaf` torn under the same lock word `word`
    /// for a lease: takes the lock over, repairs the leaf from the holder's redo copy and
    /// releases it. `img` is the reader's own leaf buffer, of the leaf's bytes (the reader
    /// re-reads the leaf into it afterwards): the repair reads the leaf into it rather than
    /// into a buffer of the largest leaf of its own, which would sit in every lookup's frame.
    pub(crate) async fn repair_torn_leaf(
        &self,
        leaf: GlobalAddr,
        img: &mut [u8],
        word: u64,
    ) -> Result<(), SmartError> {
        let bytes = img.len();
        let lock_at = leaf.add(leaf_lock_offset(bytes) as u64);
        if !self.fence_holder("leaf lock", lock_at, word).await? {
            return Ok(());
        }
        let slot = self.redo_slot(leaf.node()).await?;
        let mine = owner_word(self.ep.client_id(), slot.tag);
        let mut old = 0u64;
        self.qp(leaf)?
            .post(&mut [
                Op::Cas {
                    remote: lock_at,
                    compare: word,
                    swap: mine,
                    old: &mut old,
                },
                Op::Read {
                    remote: leaf,
                    local: &mut img[..bytes],
                },
            ])
            .await?;
        if old != word {
            // Released or taken over by someone else meanwhile: nothing for us to do.
            return Ok(());
        }
        bump(&self.stats.takeovers);
        let unlock = 0u64.to_le_bytes();
        let rewrite = self.repair_taken_leaf(leaf, &mut img[..bytes], word).await;
        match rewrite {
            Ok(true) => {
                self.qp(leaf)?
                    .post(&mut [
                        Op::Write {
                            remote: leaf.add(LEAF_STATUS_OFFSET as u64),
                            local: &img[LEAF_STATUS_OFFSET..bytes - 8],
                        },
                        Op::Write {
                            remote: lock_at,
                            local: &unlock,
                        },
                    ])
                    .await?;
                Ok(())
            }
            Ok(false) => {
                self.write(lock_at, &unlock).await?;
                Ok(())
            }
            Err(e) => {
                self.write(lock_at, &unlock).await?;
                Err(e)
            }
        }
    }
}
