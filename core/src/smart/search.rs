//! Finding a key: through the cache when it has the path, then by fresh remote reads.
use super::config::SmartError;
use super::remote::{Find, LeafSummary, NodeImg, is_retired};
use super::{Smart, bump};
use crate::fabric::{Endpoint, Work};
use remora_layouts::smart::{Header, MAX_LEAF_BYTES, NodeType, Slot, SlotKind, leaf_bytes};
use remora_layouts::{GlobalAddr, LayoutError};

/// Lookup buffer for trees whose leaves are all this small (in bytes).
const SMALL_LEAF: usize = 256;

/// Longest forward chain of out-of-place leaves followed before restarting.
const MAX_FORWARDS: usize = 64;

/// The slot that led to a node.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parent {
    pub addr: GlobalAddr,
    pub header: Header,
    pub idx: usize,
    pub slot: Slot,
}

/// Why a key is absent (decided on a fresh node image with no frozen word on the way).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Miss {
    /// No slot has the key's partial key; `free` is where an insert goes (None: full).
    Empty { free: Option<usize> },
    /// The slot holds a leaf of another key (its live leaf is `leaf`, image in the buffer).
    OtherLeaf {
        idx: usize,
        slot: Slot,
        leaf: GlobalAddr,
        bytes: usize,
    },
    /// The node's compressed prefix differs from the key at key position `at`.
    Prefix { at: usize },
    /// Slot `idx` is dead with the key's partial key: an insert takes it back.
    Dead { idx: usize, slot: Slot },
}

/// Where a search ended. `N` is the image of the node a `Miss` or `Frozen` end was decided
/// on: `()` when the search left it in the caller's slot ([`Smart::search_in`]: nothing of
/// 2 KiB is moved or cleared per search), [`NodeImg`] for callers that keep it by value
/// ([`Smart::search`]).
// `Pos<NodeImg>` is returned by value inside a write's future; boxing would allocate.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Pos<N = NodeImg> {
    /// The key's live leaf; its verified image is in the caller's buffer, `info` says
    /// what it holds.
    Leaf {
        node: GlobalAddr,
        header: Header,
        idx: usize,
        slot: Slot,
        leaf: GlobalAddr,
        bytes: usize,
        info: LeafSummary,
        /// The slot that led to `node`, when a delete of the key leaves `node` (as the
        /// image the search used has it) to be replaced by a compacted copy: removed when
        /// `others` is 0, else shrunk to a smaller type ([`super::structure::compacts`]).
        compact: Option<Parent>,
        /// Live slots of `node` other than the leaf's, in that image.
        others: usize,
    },
    /// The key is absent. `grand` led to the parent (None: unknown, or the parent is the
    /// root).
    Miss {
        node: N,
        parent: Option<Parent>,
        grand: Option<Parent>,
        miss: Miss,
    },
    /// The path goes through a node frozen by a grow: wait briefly and restart from the
    /// root, or, once it has stayed frozen for a lease, finish the grow for its dead grower
    /// ([`Smart::help_grow`]). `parent` is the slot that led to it.
    Frozen {
        node: N,
        parent: Option<Parent>,
        grand: Option<Parent>,
    },
}

impl Pos<()> {
    /// This end with the image the search left in `img`; `None` if a `Miss` or `Frozen`
    /// end finds no image there (never after [`Smart::search_in`]; the caller restarts).
    fn with_image(self, img: &mut Option<NodeImg>) -> Option<Pos> {
        Some(match self {
            Pos::Leaf {
                node,
                header,
                idx,
                slot,
                leaf,
                bytes,
                info,
                compact,
                others,
            } => Pos::Leaf {
                node,
                header,
                idx,
                slot,
                leaf,
                bytes,
                info,
                compact,
                others,
            },
            Pos::Miss {
                parent,
                grand,
                miss,
                ..
            } => Pos::Miss {
                node: img.take()?,
                parent,
                grand,
                miss,
            },
            Pos::Frozen { parent, grand, .. } => Pos::Frozen {
                node: img.take()?,
                parent,
                grand,
            },
        })
    }
}

/// Where the remote part of a search starts.
struct Start {
    addr: GlobalAddr,
    ty: NodeType,
    parent: Option<Parent>,
}

/// What the cache says about a key.
enum CacheWalk {
    /// Read this leaf directly: reached through cached `node` slot `idx`.
    Leaf {
        node: GlobalAddr,
        header: Header,
        idx: usize,
        slot: Slot,
        leaf: GlobalAddr,
        bytes: usize,
        parent: Option<Parent>,
        /// Live slots of the cached node other than `idx` (0 unless counted).
        others: usize,
    },
    /// Continue with remote reads from here.
    Remote(Start),
}

/// Live slots (neither empty nor dead) of `slots` other than slot `idx`.
fn others_live(slots: &[Slot], idx: usize) -> usize {
    slots
        .iter()
        .enumerate()
        .filter(|&(i, s)| i != idx && super::structure::is_live(s))
        .count()
}

/// Whether a search counts the live slots beside its key's in the node its leaf hangs from
/// ([`Pos::Leaf`]'s `others` and `compact`): only a delete uses them (to drop or shrink the
/// node), and a lookup never deletes. Counting tests every slot of the node (256 in a
/// Node256), which was a tenth of a cached lookup's CPU.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    /// Count them (writes: a delete may compact the node).
    Others,
    /// Leave `others` 0 and `compact` None (lookups).
    Nothing,
}

impl Count {
    fn others(self, slots: &[Slot], idx: usize) -> usize {
        match self {
            Count::Others => others_live(slots, idx),
            Count::Nothing => 0,
        }
    }

    fn compact(self, parent: Option<Parent>, ty: NodeType, others: usize) -> Option<Parent> {
        match self {
            Count::Others => compact_after(parent, ty, others),
            Count::Nothing => None,
        }
    }
}

/// The slot that led to a node of type `ty` with `others` live slots besides the key's, if a
/// delete of the key compacts the node.
fn compact_after(parent: Option<Parent>, ty: NodeType, others: usize) -> Option<Parent> {
    parent.filter(|_| super::structure::compacts(ty, others))
}

fn prefix_matches(h: Header, key: &[u8]) -> bool {
    prefix_mismatch(h, key).is_none() && h.depth() < key.len()
}

/// The first key position where the node's compressed prefix differs from `key` (a key
/// that ends inside the prefix differs at its end).
fn prefix_mismatch(h: Header, key: &[u8]) -> Option<usize> {
    let s = h.prefix_start();
    let p = h.prefix();
    (0..h.prefix_len())
        .map(|i| s + i)
        .find(|&at| key.get(at) != Some(&p[at - s]))
}

/// Slots a search of one node examines: one of a Node256 (indexed by the key byte), on
/// average half of the others' (a linear scan).
fn scanned(h: Header, slots: usize) -> usize {
    if h.node_type() == NodeType::N256 {
        1
    } else {
        slots.div_ceil(2)
    }
}

impl<'e, E: Endpoint> Smart<'e, E> {
    fn root_start(&self) -> Start {
        Start {
            addr: self.root,
            ty: NodeType::N256,
            parent: None,
        }
    }

    /// Walks the cache as far as it knows the key's path. `now`: the fabric clock at the
    /// start of the attempt (read only when reclamation is on); `count`: count the other
    /// live slots of the leaf's node ([`Count`]).
    fn walk_cache(&self, key: &[u8], now: u64, count: Count) -> CacheWalk {
        let mut cur = self.root;
        let mut cur_ty = NodeType::N256;
        let mut parent: Option<Parent> = None;
        // One entry per level: the child's entry comes from the slot's hint (or one probe).
        let start = Start {
            addr: cur,
            ty: cur_ty,
            parent,
        };
        let Some(cache) = self.node.cache(self.shard) else {
            return CacheWalk::Remote(start);
        };
        if self.cfg.reclaim {
            // Entries may name memory that has since been reused: the cache is dropped
            // whole once older than reclamation allows (see `reclaim.rs`).
            if now.saturating_sub(cache.started) >= self.timing.cache_ttl_ns() {
                drop(cache);
                if let Some(mut c) = self.node.cache_mut() {
                    c.clear(now);
                }
                return CacheWalk::Remote(start);
            }
        }
        let Some(mut id) = cache.lookup(cur) else {
            return CacheWalk::Remote(start);
        };
        loop {
            let here = Start {
                addr: cur,
                ty: cur_ty,
                parent,
            };
            let Some(c) = cache.node(id) else {
                return CacheWalk::Remote(here);
            };
            self.ep.charge(Work::Probe(1));
            let h = c.header;
            if !prefix_matches(h, key) {
                return CacheWalk::Remote(here);
            }
            self.ep.charge(Work::Scan(scanned(h, c.slots.len())));
            let Find::Match { idx, slot } = c.find(key[h.depth()]) else {
                return CacheWalk::Remote(here);
            };
            match slot.kind() {
                Ok(SlotKind::Leaf { addr, bytes, .. }) => {
                    return CacheWalk::Leaf {
                        node: cur,
                        header: h,
                        idx,
                        slot,
                        leaf: addr,
                        bytes,
                        parent,
                        others: count.others(c.slots, idx),
                    };
                }
                Ok(SlotKind::Node { addr, ty, .. }) => {
                    parent = Some(Parent {
                        addr: cur,
                        header: h,
                        idx,
                        slot,
                    });
                    let next = cache.child(id, idx, addr).filter(|&cid| {
                        cache.node(cid).is_some_and(|cc| {
                            cc.header.prefix_start() == h.depth() + 1 && cc.header.node_type() == ty
                        })
                    });
                    let Some(cid) = next else {
                        return CacheWalk::Remote(Start { addr, ty, parent });
                    };
                    id = cid;
                    cur = addr;
                    cur_ty = ty;
                }
                Ok(SlotKind::Empty | SlotKind::Dead { .. }) | Err(_) => {
                    return CacheWalk::Remote(here);
                }
            }
        }
    }

    fn invalidate(&self, addr: GlobalAddr) {
        if self.node.cache_mut().is_some_and(|mut c| c.remove(addr)) {
            bump(&self.stats.cache_invalidations);
        }
    }

    /// Reads the live leaf of `bytes` bytes reached through a slot pointing at `addr` into
    /// `buf[..bytes]`: verified, forward chain followed. Returns its address and what it
    /// holds, or `None` when the chain is too long.
    async fn read_live_leaf(
        &self,
        mut addr: GlobalAddr,
        bytes: usize,
        buf: &mut [u8],
    ) -> Result<Option<(GlobalAddr, LeafSummary)>, SmartError> {
        let Some(buf) = buf.get_mut(..bytes) else {
            // Every leaf of this tree fits the buffer; a larger one is not of this tree.
            return Err(SmartError::Corrupt {
                what: "slot announces a leaf larger than this tree's leaves",
                err: LayoutError::OutOfRange {
                    field: "leaf bytes",
                    value: bytes as u64,
                },
            });
        };
        for _ in 0..MAX_FORWARDS {
            let info = self.read_leaf(addr, buf).await?;
            match info.status.forward() {
                Some(next) if info.status.is_obsolete() && next != addr => addr = next,
                _ => return Ok(Some((addr, info))),
            }
        }
        Ok(None)
    }

    /// The largest leaf of this tree.
    pub(crate) fn max_leaf_bytes(&self) -> usize {
        let key = match self.cfg.key_mode {
            super::config::KeyMode::Fixed(n) => n,
            super::config::KeyMode::Variable => remora_layouts::smart::MAX_KEY_LEN,
        };
        leaf_bytes(key, self.cfg.value_cap).min(MAX_LEAF_BYTES)
    }

    /// [`Self::search_in`], with the image of a `Miss` or `Frozen` end moved into the
    /// position (for writes, which keep it across their own awaits).
    pub(crate) async fn search(
        &self,
        k: &[u8],
        buf: &mut [u8],
        use_cache: bool,
    ) -> Result<Option<Pos>, SmartError> {
        let mut img = None;
        let pos = self
            .search_in(k, buf, &mut img, use_cache, Count::Others)
            .await?;
        Ok(pos.and_then(|p| p.with_image(&mut img)))
    }

    /// Searches `key`. `Ok(None)`: the search met an inconsistency and must restart (from
    /// the root, without the cache).
    ///
    /// `key` is encoded; `buf` holds the largest leaf of the tree ([`Self::max_leaf_bytes`]);
    /// `img` receives each node image read, so that a `Miss` or `Frozen` end's node is the
    /// image left there; `count` says whether a `Leaf` end counts its node's other slots.
    pub(crate) async fn search_in(
        &self,
        k: &[u8],
        buf: &mut [u8],
        img: &mut Option<NodeImg>,
        use_cache: bool,
        count: Count,
    ) -> Result<Option<Pos<()>>, SmartError> {
        // An attempt that outlived the reclamation lease may have read reused memory:
        // nothing it found is trusted (see `reclaim.rs`). No clock read without reclamation;
        // with it, this one reading also dates the cache (`walk_cache`).
        let t0 = if self.cfg.reclaim {
            self.ep.now_ns()
        } else {
            0
        };
        let pos = self
            .search_attempt(k, buf, img, use_cache, t0, count)
            .await?;
        Ok(pos.filter(|_| !self.stale(t0)))
    }

    async fn search_attempt(
        &self,
        k: &[u8],
        buf: &mut [u8],
        img: &mut Option<NodeImg>,
        use_cache: bool,
        t0: u64,
        count: Count,
    ) -> Result<Option<Pos<()>>, SmartError> {
        let use_cache = use_cache && self.cfg.techniques.cache;
        let start = if use_cache {
            match self.walk_cache(k, t0, count) {
                CacheWalk::Remote(s) => s,
                CacheWalk::Leaf {
                    node,
                    header,
                    idx,
                    slot,
                    leaf,
                    bytes,
                    parent,
                    others,
                } => {
                    let Some((live, info)) = self.read_live_leaf(leaf, bytes, buf).await? else {
                        return Ok(None);
                    };
                    if is_retired(info.status, live) {
                        // Deleted and being unlinked: the fresh path finishes it.
                        self.invalidate(node);
                        return Ok(None);
                    }
                    // Reverse check: the leaf must name the cached node as its parent.
                    if info.reverse != node.pack48().unwrap_or(0) {
                        self.invalidate(node);
                    } else if live != leaf {
                        // The cached slot named an out-of-place leaf that has since been
                        // replaced: point it at the live end of the chain, so that the next
                        // lookup reads one leaf instead of following the chain again (the
                        // authors' code drops the entry and re-reads the parent slot instead;
                        // without either, every update of a hot key lengthens every other
                        // client's chain by one READ).
                        if let Ok(s) = Slot::leaf(slot.pkey(), live, bytes)
                            && let Some(mut c) = self.node.cache_mut()
                        {
                            c.set_slot(node, idx, s);
                        }
                    }
                    if info.key(buf) == k {
                        bump(&self.stats.cache_leaf_hits);
                        return Ok(Some(Pos::Leaf {
                            node,
                            header,
                            idx,
                            slot,
                            leaf: live,
                            bytes,
                            info,
                            compact: count.compact(parent, header.node_type(), others),
                            others,
                        }));
                    }
                    self.invalidate(node);
                    Start {
                        addr: node,
                        ty: header.node_type(),
                        parent,
                    }
                }
            }
        } else {
            self.root_start()
        };
        self.search_remote(k, start, buf, img, use_cache, t0, count)
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn search_remote(
        &self,
        k: &[u8],
        start: Start,
        buf: &mut [u8],
        slot: &mut Option<NodeImg>,
        use_cache: bool,
        t0: u64,
        count: Count,
    ) -> Result<Option<Pos<()>>, SmartError> {
        let Start {
            mut addr,
            mut ty,
            mut parent,
        } = start;
        let mut grand: Option<Parent> = None;
        loop {
            let img = &*slot.insert(self.read_node(addr, ty).await?);
            let h = img.header;
            let expect = parent.map_or(0, |p| p.header.depth() + 1);
            if !h.is_obsolete() && !h.is_frozen() && h.prefix_start() < expect {
                // A prefix split that swung the parent slot to its new node but has not yet
                // shortened this node's prefix: anyone finishes it (see `prefix_split`).
                if self.finish_prefix_split(addr, h, expect).await? {
                    bump(&self.stats.repairs);
                }
                continue;
            }
            if !h.is_obsolete() && h.is_frozen() && h.prefix_start() < expect {
                // ... and a grow froze the node before the split was finished: the grow's
                // copy gets the shortened prefix (see `copy_of`).
                bump(&self.stats.lock_waits);
                return Ok(Some(Pos::Frozen {
                    node: (),
                    parent,
                    grand,
                }));
            }
            if h.is_obsolete() || h.prefix_start() != expect {
                if let Some(p) = parent {
                    self.invalidate(p.addr);
                }
                self.invalidate(addr);
                return Ok(None);
            }
            if use_cache {
                // A reverse pointer that does not name the parent: the cached parent is stale.
                // Only lock-free internal nodes carry one (the lock-based baseline's read 0:
                // comparing theirs would drop every cached parent of a node read remotely).
                if let Some(p) = parent
                    && self.cfg.techniques.lock_free_internal
                    && img.rev != p.addr.pack48().unwrap_or(0)
                {
                    self.invalidate(p.addr);
                }
                self.ep.charge(Work::Probe(1));
                if let Some(mut c) = self.node.cache_mut() {
                    c.put(img);
                }
            }
            // A frozen node may be mid-copy: decide nothing negative on it.
            let mut wait = false;
            if let Some(at) = prefix_mismatch(h, k) {
                if h.is_frozen() {
                    wait = true;
                } else if at >= k.len() {
                    return Err(SmartError::BadKey {
                        why: "a key is a prefix of another (mixed fixed key lengths?)",
                    });
                } else {
                    return Ok(Some(Pos::Miss {
                        node: (),
                        parent,
                        grand,
                        miss: Miss::Prefix { at },
                    }));
                }
            } else if h.depth() >= k.len() {
                return Err(SmartError::BadKey {
                    why: "a key is a prefix of another (mixed fixed key lengths?)",
                });
            }
            if !wait {
                self.ep.charge(Work::Scan(scanned(h, img.slots.len())));
                match img.find(k[h.depth()]) {
                    Find::Absent { frozen: true, .. } => {}
                    Find::Absent {
                        free,
                        frozen: false,
                    } => {
                        return Ok(Some(Pos::Miss {
                            node: (),
                            parent,
                            grand,
                            miss: Miss::Empty { free },
                        }));
                    }
                    Find::Match { idx, slot } => match slot.kind() {
                        Ok(SlotKind::Node {
                            addr: child,
                            ty: cty,
                            ..
                        }) => {
                            grand = parent;
                            parent = Some(Parent {
                                addr,
                                header: h,
                                idx,
                                slot,
                            });
                            addr = child;
                            ty = cty;
                            continue;
                        }
                        Ok(SlotKind::Leaf {
                            addr: la, bytes, ..
                        }) => {
                            let Some((live, info)) = self.read_live_leaf(la, bytes, buf).await?
                            else {
                                return Ok(None);
                            };
                            let frozen = slot.is_frozen() || h.is_frozen();
                            if is_retired(info.status, live) {
                                // A deleted leaf not yet unlinked: finish the unlink, then
                                // restart (the key is absent, or elsewhere by then). A stale
                                // attempt posts no CAS on what it learned (its node may be
                                // reused by now: reclaim.rs); it restarts and a fresh one
                                // unlinks.
                                if !frozen {
                                    if !self.stale(t0) {
                                        self.unlink_leaf(addr, h, idx, slot, live, bytes).await?;
                                    }
                                    return Ok(None);
                                }
                            } else if info.key(buf) == k {
                                let others = count.others(img.live_slots(), idx);
                                return Ok(Some(Pos::Leaf {
                                    node: addr,
                                    header: h,
                                    idx,
                                    slot,
                                    leaf: live,
                                    bytes,
                                    info,
                                    compact: count.compact(parent, h.node_type(), others),
                                    others,
                                }));
                            } else if !frozen {
                                return Ok(Some(Pos::Miss {
                                    node: (),
                                    parent,
                                    grand,
                                    miss: Miss::OtherLeaf {
                                        idx,
                                        slot,
                                        leaf: live,
                                        bytes,
                                    },
                                }));
                            }
                        }
                        Ok(SlotKind::Dead { .. }) => {
                            if !(slot.is_frozen() || h.is_frozen()) {
                                return Ok(Some(Pos::Miss {
                                    node: (),
                                    parent,
                                    grand,
                                    miss: Miss::Dead { idx, slot },
                                }));
                            }
                        }
                        Ok(SlotKind::Empty) | Err(_) => return Ok(None),
                    },
                }
            }
            // A frozen word on the way: decide nothing here.
            if !h.is_frozen() {
                // A frozen slot in a node whose header is not frozen: mid-change, re-read.
                return Ok(None);
            }
            bump(&self.stats.lock_waits);
            return Ok(Some(Pos::Frozen {
                node: (),
                parent,
                grand,
            }));
        }
    }

    /// A plain lookup of encoded `key`: copies the value into `out`.
    ///
    /// The rare path (waiting on a frozen node, which may finish a dead grower's grow) runs
    /// here, beside the attempt rather than inside it: each attempt ([`Self::lookup_attempt`])
    /// ends in an [`Attempt`] naming the slow work, so that this future's frame holds the
    /// larger of an attempt (leaf buffer and search) and the wait, not their sum.
    pub(crate) async fn lookup(
        &self,
        key: &[u8],
        out: &mut [u8],
    ) -> Result<Option<usize>, SmartError> {
        let mut pace = self.pace();
        let mut frozen = None;
        let mut use_cache = true;
        // Node images the search reads land here, not in its result.
        let mut img = None;
        loop {
            match self.lookup_attempt(key, out, &mut img, use_cache).await? {
                Attempt::Done(r) => return Ok(r),
                Attempt::Restart(what) => {
                    use_cache = false;
                    self.restart(&mut pace, what).await?;
                }
                Attempt::Frozen { parent, grand } => {
                    let Some(node) = img.as_ref() else {
                        // `search_in` leaves the frozen node's image: never taken.
                        use_cache = false;
                        self.restart(&mut pace, "lookup lost a frozen node's image")
                            .await?;
                        continue;
                    };
                    let path = (parent, grand);
                    self.wait_frozen(&mut pace, &mut frozen, node, path, !use_cache, false)
                        .await?;
                    use_cache = false;
                }
            }
        }
    }

    /// One search of a lookup, with a leaf buffer of the tree's largest leaf (no 4 KiB
    /// buffer to clear per lookup when leaves are small).
    async fn lookup_attempt(
        &self,
        key: &[u8],
        out: &mut [u8],
        img: &mut Option<NodeImg>,
        use_cache: bool,
    ) -> Result<Attempt, SmartError> {
        if self.max_leaf_bytes() <= SMALL_LEAF {
            let mut buf = [0u8; SMALL_LEAF];
            self.lookup_in(key, out, &mut buf, img, use_cache).await
        } else {
            let mut buf = [0u8; MAX_LEAF_BYTES];
            self.lookup_in(key, out, &mut buf, img, use_cache).await
        }
    }

    async fn lookup_in(
        &self,
        key: &[u8],
        out: &mut [u8],
        buf: &mut [u8],
        img: &mut Option<NodeImg>,
        use_cache: bool,
    ) -> Result<Attempt, SmartError> {
        let pos = self
            .search_in(key, buf, img, use_cache, Count::Nothing)
            .await?;
        Ok(match pos {
            None => Attempt::Restart("lookup kept meeting inconsistent nodes"),
            Some(Pos::Frozen { parent, grand, .. }) => Attempt::Frozen { parent, grand },
            Some(Pos::Miss { .. }) => Attempt::Done(None),
            Some(Pos::Leaf { info, .. }) => {
                if !info.status.is_valid() {
                    return Ok(Attempt::Done(None));
                }
                let v = info.value(buf);
                let n = v.len();
                if n > out.len() {
                    return Err(SmartError::BufferTooSmall {
                        need: n,
                        got: out.len(),
                    });
                }
                out[..n].copy_from_slice(v);
                Attempt::Done(Some(n))
            }
        })
    }
}

/// How one lookup attempt ended: with its result, or naming the work [`Smart::lookup`] does
/// before the next attempt.
enum Attempt {
    Done(Option<usize>),
    /// Restart from the root (after a back-off), for this reason.
    Restart(&'static str),
    /// The search met a frozen node (its image left in the lookup's `img`) through these
    /// parent and grandparent slots: wait on it, or help its grow.
    Frozen {
        parent: Option<Parent>,
        grand: Option<Parent>,
    },
}
