//! [`Index`]: an application's handle on an index of a compute node.
use super::Inner;
use super::block::block_on;
use super::error::Error;
use super::poller::PAIR_HEADER;
use super::slot::{Cmd, Outcome, SlotData};
use std::cell::Cell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A handle on one index of a [`crate::node::ComputeNode`]: cheap to clone, `Send + Sync`,
/// usable from any thread. Each operation is a future ([`Op`]) that a poller thread runs;
/// await it (under tokio or any executor) or block on it with [`Op::wait`].
///
/// Keys and values are copied into the poller's preallocated slot when the operation is
/// first polled, and results are copied out when it completes: the poller never holds the
/// caller's memory.
#[derive(Clone)]
pub struct Index {
    pub(crate) inner: Arc<Inner>,
    pub(crate) id: usize,
    pub(crate) name: &'static str,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("index", &self.name)
            .field("id", &self.id)
            .finish()
    }
}

/// Where an operation's result is copied to, besides its return value.
pub(crate) enum Out<'a> {
    None,
    /// A value ([`Index::get_into`]).
    Bytes(&'a mut [u8]),
    /// Spatial search hits ([`crate::node::Spatial::search_into`]).
    Entries(&'a mut Vec<remora_core::catfish::Entry>),
}

pub(crate) type Finish<T> = fn(&mut SlotData, &mut Out<'_>) -> Result<T, Error>;

impl Index {
    /// The index's name (`smart`, `sherman`, ...).
    pub fn name(&self) -> &'static str {
        self.name
    }

    pub(crate) fn op<'a, T>(
        &'a self,
        cmd: Cmd,
        key: &'a [u8],
        value: &'a [u8],
        out: Out<'a>,
        finish: Finish<T>,
    ) -> Op<'a, T> {
        Op {
            inner: &self.inner,
            index: self.id,
            cmd,
            key,
            value,
            out,
            finish,
            at: None,
            done: false,
        }
    }

    /// Inserts `key` or overwrites its value.
    pub fn upsert<'a>(&'a self, key: &'a [u8], value: &'a [u8]) -> Op<'a, ()> {
        self.op(Cmd::Upsert, key, value, Out::None, |d, _| match d.result {
            Ok(_) => Ok(()),
            Err(_) => Err(take_err(d)),
        })
    }

    /// Overwrites `key`'s value if `key` is present; `false` if it is absent.
    pub fn update<'a>(&'a self, key: &'a [u8], value: &'a [u8]) -> Op<'a, bool> {
        self.op(Cmd::Update, key, value, Out::None, finish_bool)
    }

    /// Removes `key`; `false` if it was absent.
    pub fn delete<'a>(&'a self, key: &'a [u8]) -> Op<'a, bool> {
        self.op(Cmd::Delete, key, &[], Out::None, finish_bool)
    }

    /// `key`'s value, or `None` if absent.
    pub fn get<'a>(&'a self, key: &'a [u8]) -> Op<'a, Option<Vec<u8>>> {
        self.op(Cmd::Get, key, &[], Out::None, |d, _| match d.result {
            Ok(Outcome::Len(Some(n))) => Ok(Some(d.value[..n.min(d.value.len())].to_vec())),
            Ok(_) => Ok(None),
            Err(_) => Err(take_err(d)),
        })
    }

    /// Copies `key`'s value into `out` and returns its length, or `None` if absent (no
    /// allocation). A value longer than `out` is [`Error::ValueTooLong`].
    pub fn get_into<'a>(&'a self, key: &'a [u8], out: &'a mut [u8]) -> Op<'a, Option<usize>> {
        self.op(Cmd::Get, key, &[], Out::Bytes(out), |d, out| {
            match d.result {
                Ok(Outcome::Len(Some(n))) => {
                    let Out::Bytes(out) = out else {
                        return Err(Error::Config("get_into without a buffer".into()));
                    };
                    if n > out.len() || n > d.value.len() {
                        return Err(Error::ValueTooLong {
                            len: n,
                            max: out.len(),
                        });
                    }
                    out[..n].copy_from_slice(&d.value[..n]);
                    Ok(Some(n))
                }
                Ok(_) => Ok(None),
                Err(_) => Err(take_err(d)),
            }
        })
    }

    /// The pairs with `from <= key < end` in key order, at most `limit` of them, fetched
    /// from the index in batches as the iterator is consumed (blocking with
    /// [`Iterator::next`], or awaited with [`Scan::next_async`]). `end: None` scans to the
    /// last key. Each batch is one consistent scan of the index; batches are not one
    /// snapshot.
    pub fn scan(&self, from: &[u8], end: Option<&[u8]>, limit: usize) -> Scan {
        let per = self.inner.limits.scan_batch();
        Scan {
            index: self.clone(),
            from: from.to_vec(),
            skip: None,
            end: end.map(<[u8]>::to_vec),
            left: limit,
            per,
            batch: VecDeque::new(),
            finished: limit == 0,
        }
    }
}

/// The error a failed slot holds, taken out (the slot's result is reset).
pub(crate) fn take_err(d: &mut SlotData) -> Error {
    match std::mem::replace(&mut d.result, Ok(Outcome::Unit)) {
        Err(e) => e,
        Ok(_) => Error::Config("an operation with no error".into()),
    }
}

fn finish_bool(d: &mut SlotData, _: &mut Out<'_>) -> Result<bool, Error> {
    match d.result {
        Ok(Outcome::Bool(b)) => Ok(b),
        Ok(_) => Ok(false),
        Err(_) => Err(take_err(d)),
    }
}

thread_local! {
    /// The poller this application thread submits to next (round robin per thread).
    static NEXT: Cell<usize> = Cell::new({
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0);
        h.finish() as usize
    });
}

/// One operation of an [`Index`]: a future, `Send`, resolved by a poller thread.
///
/// Lazy: nothing is submitted until it is first polled. **Dropped halfway** (after its first
/// poll, before its result), the operation still runs to its end on the poller, and its
/// result is discarded: an index operation is never stopped in the middle, so it never
/// leaves a lock held, and a write may or may not have taken effect (as with a timeout of
/// any remote call). The node's pollers run until every such operation has finished, even
/// when the node and its handles are dropped.
#[must_use = "an operation does nothing until awaited or waited for"]
pub struct Op<'a, T> {
    inner: &'a Arc<Inner>,
    index: usize,
    cmd: Cmd,
    key: &'a [u8],
    value: &'a [u8],
    out: Out<'a>,
    finish: Finish<T>,
    /// (poller, slot) once submitted.
    at: Option<(usize, u32)>,
    done: bool,
}

impl<T> Op<'_, T> {
    /// Whether the operation is in a poller's hands (polled, and given a slot).
    pub fn is_submitted(&self) -> bool {
        self.at.is_some()
    }

    /// Blocks this thread until the operation's result (for threads outside any async
    /// runtime; inside one, `.await` it instead).
    pub fn wait(self) -> Result<T, Error> {
        block_on(self)
    }

    /// Copies the request into a free slot of some poller and queues it; `Pending` (with
    /// the waker registered) when every poller's slots are busy.
    fn submit(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let lim = &self.inner.limits;
        if self.key.len() > lim.max_key {
            return Poll::Ready(Err(Error::KeyTooLong {
                len: self.key.len(),
                max: lim.max_key,
            }));
        }
        if self.value.len() > lim.max_value {
            return Poll::Ready(Err(Error::ValueTooLong {
                len: self.value.len(),
                max: lim.max_value,
            }));
        }
        let pollers = &self.inner.pollers;
        let first = NEXT.with(|n| {
            let v = n.get();
            n.set(v.wrapping_add(1));
            v % pollers.len()
        });
        for attempt in 0..2 {
            for k in 0..pollers.len() {
                let p = (first + k) % pollers.len();
                if let Some(i) = pollers[p].try_acquire() {
                    {
                        let mut d = pollers[p].slots[i as usize].data();
                        d.cmd = self.cmd;
                        d.index = self.index;
                        d.key[..self.key.len()].copy_from_slice(self.key);
                        d.key_len = self.key.len();
                        d.value[..self.value.len()].copy_from_slice(self.value);
                        d.value_len = self.value.len();
                    }
                    pollers[p].submit(i);
                    self.at = Some((p, i));
                    return Poll::Ready(Ok(()));
                }
            }
            if attempt == 0 {
                // All busy: ask to be woken at the next free slot, then look once more (a
                // slot freed in between is not missed).
                pollers[first].wait_for_slot(cx.waker());
            }
        }
        Poll::Pending
    }
}

impl<T> Future for Op<'_, T> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, Error>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(Err(Error::Config(
                "an operation polled after it completed".into(),
            )));
        }
        if this.at.is_none() {
            match this.submit(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => {
                    this.done = true;
                    return Poll::Ready(Err(e));
                }
                Poll::Ready(Ok(())) => {}
            }
        }
        let (p, i) = this.at.expect("submitted above");
        let poller = &this.inner.pollers[p];
        let slot = &poller.slots[i as usize];
        if !slot.is_done() {
            slot.set_waker(cx.waker());
            if !slot.is_done() {
                return Poll::Pending;
            }
        }
        let r = {
            let mut d = slot.data();
            (this.finish)(&mut d, &mut this.out)
        };
        this.at = None;
        this.done = true;
        poller.release(i);
        Poll::Ready(r)
    }
}

impl<T> Drop for Op<'_, T> {
    fn drop(&mut self) {
        if let Some((p, i)) = self.at.take() {
            let poller = &self.inner.pollers[p];
            if !poller.abandon(i) {
                // Already done: the result is ours to discard.
                poller.release(i);
            }
        }
    }
}

/// A bounded scan of an [`Index`] (see [`Index::scan`]): an iterator of `(key, value)`
/// pairs, fetched in batches.
pub struct Scan {
    index: Index,
    /// Where the next batch starts.
    from: Vec<u8>,
    /// The last key returned, which the next batch (starting at it) skips.
    skip: Option<Vec<u8>>,
    end: Option<Vec<u8>>,
    left: usize,
    per: usize,
    batch: VecDeque<(Vec<u8>, Vec<u8>)>,
    finished: bool,
}

impl Scan {
    /// The next pair, awaited (the async form of [`Iterator::next`]).
    pub async fn next_async(&mut self) -> Option<Result<(Vec<u8>, Vec<u8>), Error>> {
        if self.batch.is_empty() && !self.finished {
            let ask = self.per.min(self.left) + usize::from(self.skip.is_some());
            let got = self
                .index
                .op(
                    Cmd::Scan { limit: ask },
                    &self.from,
                    &[],
                    Out::None,
                    decode_pairs,
                )
                .await;
            match got {
                Err(e) => {
                    self.finished = true;
                    return Some(Err(e));
                }
                Ok((visited, pairs)) => self.take_batch(ask, visited, pairs),
            }
        }
        let pair = self.batch.pop_front()?;
        self.left -= 1;
        if self.left == 0 {
            self.finished = true;
            self.batch.clear();
        }
        Some(Ok(pair))
    }

    fn take_batch(&mut self, asked: usize, visited: usize, pairs: Pairs) {
        if visited < asked {
            self.finished = true; // the index has no more keys from `from`
        }
        let mut last = None;
        for (k, v) in pairs {
            if self.skip.as_deref() == Some(&k[..]) || k < self.from {
                continue;
            }
            if self.end.as_deref().is_some_and(|e| k.as_slice() >= e) {
                self.finished = true;
                break;
            }
            last = Some(k.clone());
            if self.batch.len() < self.left {
                self.batch.push_back((k, v));
            }
        }
        match last {
            Some(k) => {
                self.from.clone_from(&k);
                self.skip = Some(k);
            }
            None => self.finished = true,
        }
    }
}

/// Scanned `(key, value)` pairs.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// A scan slot's pairs, decoded: (pairs the index visited, pairs).
fn decode_pairs(d: &mut SlotData, _: &mut Out<'_>) -> Result<(usize, Pairs), Error> {
    let visited = match d.result {
        Ok(Outcome::Count(n)) => n,
        Ok(_) => 0,
        Err(_) => return Err(take_err(d)),
    };
    let buf = &d.value[..d.value_len];
    let mut out = Vec::new();
    let mut at = 0;
    while at + PAIR_HEADER <= buf.len() {
        let kl = u16::from_le_bytes([buf[at], buf[at + 1]]) as usize;
        let vl = u32::from_le_bytes([buf[at + 2], buf[at + 3], buf[at + 4], buf[at + 5]]) as usize;
        let k = at + PAIR_HEADER;
        if k + kl + vl > buf.len() {
            break;
        }
        out.push((buf[k..k + kl].to_vec(), buf[k + kl..k + kl + vl].to_vec()));
        at = k + kl + vl;
    }
    Ok((visited, out))
}

impl Iterator for Scan {
    type Item = Result<(Vec<u8>, Vec<u8>), Error>;
    fn next(&mut self) -> Option<Self::Item> {
        block_on(self.next_async())
    }
}
