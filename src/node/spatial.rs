//! Catfish, the spatial index, through the compute node: [`Spatial`] handles and each
//! poller's Catfish client.
//!
//! A Catfish client matches replies to its one outstanding request on its queue pair, and
//! the server's flow control counts the replies per connection: so each poller has **one**
//! client on its endpoint, and the poller's coroutines take turns on it (a FIFO turnstile,
//! [`CatfishOn`]). A node runs as many Catfish operations at once as it has pollers, as the
//! paper runs one client per thread; offloaded searches included.
use super::error::Error;
use super::handle::{Index, Op, Out, take_err};
use super::slot::{Cmd, Outcome, SlotData};
use remora_core::catfish::{CatfishClient, CatfishError, Entry, Mode, Rect, Status, TreeKind};
use remora_core::fabric::Endpoint;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::task::{Poll, Waker};

/// A spatial index to open with [`crate::node::ComputeNode::open_spatial`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum SpatialConfig {
    /// Catfish's R-tree; its memory node runs the `catfish` service.
    Catfish(CatfishConfig),
}

impl SpatialConfig {
    /// Catfish as its paper runs it (see [`CatfishConfig::default`]).
    pub fn catfish() -> SpatialConfig {
        SpatialConfig::Catfish(CatfishConfig::default())
    }

    /// The index's name.
    pub fn name(&self) -> &'static str {
        match self {
            SpatialConfig::Catfish(_) => "catfish",
        }
    }

    /// The service the index needs on its memory node.
    pub fn service(&self) -> &'static str {
        match self {
            SpatialConfig::Catfish(_) => "catfish",
        }
    }
}

/// How Catfish's tree is created and searched.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct CatfishConfig {
    /// Entries per node (4 to 130; the paper runs 15, 30, 70 and 130), used when the tree is
    /// created. A tree already on the memory node is opened with its own.
    pub fanout: usize,
    /// The tree created when there is none (an existing tree keeps its own kind).
    pub kind: TreeKind,
    /// How searches run: by fast messaging, by offloading (one-sided READs), or adaptively
    /// by the server's heartbeats (the paper's Algorithm 1).
    pub search: Mode,
}

impl Default for CatfishConfig {
    /// The R*-tree (the paper's main tree), fanout 30, adaptive searches: what `remora
    /// bench --index catfish` runs by default.
    fn default() -> Self {
        CatfishConfig {
            fanout: 30,
            kind: TreeKind::RStar,
            search: Mode::Adaptive,
        }
    }
}

impl CatfishConfig {
    /// This configuration with searches run in `mode`.
    pub fn with_search(mut self, mode: Mode) -> CatfishConfig {
        self.search = mode;
        self
    }

    /// This configuration creating a tree of `kind` with `fanout` entries per node.
    pub fn with_tree(mut self, kind: TreeKind, fanout: usize) -> CatfishConfig {
        self.kind = kind;
        self.fanout = fanout;
        self
    }
}

/// A handle on a spatial index of a [`crate::node::ComputeNode`]: cheap to clone, `Send +
/// Sync`, usable from any thread, with the same [`Op`] futures (awaited, or blocked on with
/// [`Op::wait`]) and the same [`Error`] as [`Index`]. Each entry is a rectangle with a
/// `u64` value (Catfish's object id); several entries may share a rectangle.
///
/// Each poller has one Catfish client (one request outstanding on its queue pair), so the
/// node runs as many Catfish operations at once as it has pollers; more wait their turn in
/// FIFO order. A search's hits are gathered on the poller in its slot's buffer (grown to the
/// largest search it has run, then reused) before at most `limit` are handed back.
#[derive(Clone, Debug)]
pub struct Spatial {
    pub(crate) index: Index,
}

impl Spatial {
    /// The index's name (`catfish`).
    pub fn name(&self) -> &'static str {
        self.index.name
    }

    /// Inserts `rect` with `value` (through the memory node's server, as Catfish always
    /// does). An invalid rectangle (a minimum above its maximum) is [`Error::BadRect`].
    pub fn insert(&self, rect: Rect, value: u64) -> Op<'_, ()> {
        self.index.op(
            Cmd::SpatialInsert { rect, value },
            &[],
            &[],
            Out::None,
            |d, _| match d.result {
                Ok(_) => Ok(()),
                Err(_) => Err(take_err(d)),
            },
        )
    }

    /// Deletes the entry of `rect` with `value`; `false` if there was none.
    pub fn delete(&self, rect: Rect, value: u64) -> Op<'_, bool> {
        self.index.op(
            Cmd::SpatialDelete { rect, value },
            &[],
            &[],
            Out::None,
            |d, _| match d.result {
                Ok(Outcome::Bool(b)) => Ok(b),
                Ok(_) => Ok(false),
                Err(_) => Err(take_err(d)),
            },
        )
    }

    /// The entries whose rectangle intersects `window` (bounds inclusive), at most `limit`
    /// of them, in the tree's order. [`Spatial::search_into`] tells how many matched.
    pub fn search(&self, window: Rect, limit: usize) -> Op<'_, Vec<Entry>> {
        self.index.op(
            Cmd::SpatialSearch {
                rect: window,
                limit,
            },
            &[],
            &[],
            Out::None,
            |d, _| {
                let n = hits(d)?;
                Ok(d.hits[..n.min(limit_of(d))].to_vec())
            },
        )
    }

    /// Like [`Spatial::search`], into `out` (cleared first, then at most `limit` entries;
    /// no allocation once `out` has room): returns how many entries matched in all, which
    /// is more than `out` holds when the limit cut them.
    pub fn search_into<'a>(
        &'a self,
        window: Rect,
        limit: usize,
        out: &'a mut Vec<Entry>,
    ) -> Op<'a, usize> {
        self.index.op(
            Cmd::SpatialSearch {
                rect: window,
                limit,
            },
            &[],
            &[],
            Out::Entries(out),
            |d, out| {
                let n = hits(d)?;
                if let Out::Entries(out) = out {
                    out.clear();
                    out.extend_from_slice(&d.hits[..n.min(limit_of(d))]);
                }
                Ok(n)
            },
        )
    }
}

/// How many entries a search slot holds, or its error.
fn hits(d: &mut SlotData) -> Result<usize, Error> {
    match d.result {
        Ok(Outcome::Count(n)) => Ok(n.min(d.hits.len())),
        Ok(_) => Ok(0),
        Err(_) => Err(take_err(d)),
    }
}

/// The limit a search asked for (carried in its command).
fn limit_of(d: &SlotData) -> usize {
    match d.cmd {
        Cmd::SpatialSearch { limit, .. } => limit,
        _ => 0,
    }
}

/// One poller's Catfish client on its endpoint, shared by the poller's coroutines in turn.
pub(crate) struct CatfishOn<'e, E: Endpoint> {
    ep: &'e E,
    client: RefCell<CatfishClient>,
    mode: Mode,
    busy: Cell<bool>,
    /// Coroutines waiting for the client, first come first served.
    waiters: RefCell<VecDeque<Waker>>,
}

/// The client, held: releasing it hands it to the next waiter.
struct Turn<'a, 'e, E: Endpoint>(&'a CatfishOn<'e, E>);

impl<E: Endpoint> Drop for Turn<'_, '_, E> {
    fn drop(&mut self) {
        self.0.busy.set(false);
        let next = self.0.waiters.borrow_mut().pop_front();
        if let Some(w) = next {
            w.wake();
        }
    }
}

impl<'e, E: Endpoint> CatfishOn<'e, E> {
    /// Opens the tree on `ep`'s memory node 0, creating it if there is none (a creator that
    /// loses a race to another compute node opens the winner's).
    pub(crate) async fn open(
        ep: &'e E,
        cfg: &CatfishConfig,
        depth: usize,
    ) -> Result<CatfishOn<'e, E>, Error> {
        let node = *ep
            .nodes()
            .first()
            .ok_or_else(|| Error::Config("Catfish needs a memory node".into()))?;
        let qp = ep.qp(node).map_err(Error::Fabric)?;
        let client = match CatfishClient::open(qp).await {
            Ok(c) => c,
            Err(CatfishError::NotCreated) => {
                match CatfishClient::create_tree(qp, 1, cfg.fanout, cfg.kind).await {
                    Ok(c) => c,
                    // Another creator formatted it first: the server refuses a second Init.
                    Err(CatfishError::Server(Status::BadRequest)) => {
                        CatfishClient::open(qp).await?
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        };
        Ok(CatfishOn {
            ep,
            client: RefCell::new(client),
            mode: cfg.search,
            busy: Cell::new(false),
            waiters: RefCell::new(VecDeque::with_capacity(depth)),
        })
    }

    /// Waits for this poller's client (FIFO among its coroutines; a coroutine polled only
    /// when woken, as the poller does, is queued once).
    async fn turn(&self) -> Turn<'_, 'e, E> {
        let mut queued = false;
        poll_fn(|cx| {
            if !self.busy.get() && (queued || self.waiters.borrow().is_empty()) {
                self.busy.set(true);
                return Poll::Ready(());
            }
            self.waiters.borrow_mut().push_back(cx.waker().clone());
            queued = true;
            Poll::Pending
        })
        .await;
        Turn(self)
    }

    fn qp(&self) -> Result<&'e E::Qp, Error> {
        let node = *self
            .ep
            .nodes()
            .first()
            .ok_or_else(|| Error::Config("Catfish needs a memory node".into()))?;
        self.ep.qp(node).map_err(Error::Fabric)
    }

    // The client's RefCell borrow is held across awaits on purpose: the turn above makes it
    // the only one on this poller (a second borrow would be a bug, caught as a panic).
    #[allow(clippy::await_holding_refcell_ref)]
    pub(crate) async fn insert(&self, rect: Rect, value: u64) -> Result<(), Error> {
        check(rect)?;
        let _t = self.turn().await;
        let mut c = self.client.borrow_mut();
        Ok(c.insert(self.qp()?, rect, value).await?)
    }

    #[allow(clippy::await_holding_refcell_ref)]
    pub(crate) async fn delete(&self, rect: Rect, value: u64) -> Result<bool, Error> {
        check(rect)?;
        let _t = self.turn().await;
        let mut c = self.client.borrow_mut();
        Ok(c.delete(self.qp()?, rect, value).await?)
    }

    /// Appends every entry intersecting `rect` to `out`.
    #[allow(clippy::await_holding_refcell_ref)]
    pub(crate) async fn search(&self, rect: Rect, out: &mut Vec<Entry>) -> Result<(), Error> {
        check(rect)?;
        let _t = self.turn().await;
        let mut c = self.client.borrow_mut();
        match self.mode {
            Mode::Adaptive => c.search_adaptive(self.ep, rect, out).await?,
            m => c.search(self.qp()?, rect, m, out).await?,
        };
        Ok(())
    }
}

fn check(rect: Rect) -> Result<(), Error> {
    if rect.is_valid() {
        Ok(())
    } else {
        Err(Error::BadRect(rect))
    }
}
