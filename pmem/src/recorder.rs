//! A crash-image recorder: persistent memory for tests that knows what a crash could leave.
//!
//! [`Recorder`] implements [`PersistMem`] over a byte image and tracks, per 64-byte cache line:
//!
//! * the **durable** content: what the media holds for sure (the content at the line's last
//!   flush that a fence has since completed);
//! * whether the line is **dirty**: written since its last flush;
//! * whether it is **flushed** but not yet fenced (the write-back may or may not be done).
//!
//! Dirty and flushed-unfenced lines are *pending*: a real CPU may write a line back at any
//! time (eviction), and an issued flush may not have completed, so after a power failure each
//! pending line independently holds either its durable content or its newest content. A line is
//! written back whole, so nothing tears inside a line; in particular an 8-byte aligned store
//! (which never crosses a line) is atomic at crash. A store spanning two lines can tear.
//!
//! # Persistence points
//!
//! Every [`fence`](PersistMem::fence) is a numbered persistence point. Just before applying it
//! the recorder can capture a [`CrashState`] (enable with [`Recorder::record_points`], read back
//! with [`Recorder::persistence_points`], or stream with [`Recorder::set_fence_hook`]). Pending
//! lines only accumulate between two fences, so the crash images of the state captured before
//! fence `k` cover a crash at any instant between fences `k - 1` and `k`: a test that checks
//! every image of every captured state, plus [`Recorder::snapshot`] at the end, has checked
//! every crash the model allows.
//!
//! Limitation: a pending line's "newest content" is its content at capture time; an older
//! intermediate version of the same line (written and overwritten between two fences) is not
//! enumerated.
//!
//! # Crash images
//!
//! [`CrashState::crash_images`] yields images where any subset of the pending lines reached the
//! media: all `2^k` subsets when `k <= 10` ([`EXHAUSTIVE_LIMIT`]), otherwise a bounded,
//! seeded, reproducible sample that starts with the adversarial extremes (none, all, each line
//! alone, all but each line) and continues with random subsets.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use crate::flush::CACHE_LINE;
use crate::{PersistMem, PmemError, check_range, check_word};

/// Crash images are enumerated exhaustively up to this many pending lines.
pub const EXHAUSTIVE_LIMIT: usize = 10;

/// Tracking state of one pending cache line.
#[derive(Clone, Debug)]
struct LineState {
    /// Content at the last flush not yet fenced (becomes durable at the next fence).
    flushed: Option<Vec<u8>>,
    /// Written since the last flush.
    dirty: bool,
}

type FenceHook = Box<dyn FnMut(&CrashState) + Send>;

struct Inner {
    current: Vec<u8>,
    durable: Vec<u8>,
    pending: BTreeMap<usize, LineState>,
    fences: u64,
    log_points: bool,
    points: Vec<CrashState>,
    hook: Option<FenceHook>,
}

impl Inner {
    fn line_range(&self, line: usize) -> core::ops::Range<usize> {
        let start = line * CACHE_LINE;
        start..(start + CACHE_LINE).min(self.current.len())
    }

    fn state(&self) -> CrashState {
        CrashState {
            fences_completed: self.fences,
            durable: self.durable.clone(),
            pending: self
                .pending
                .iter()
                .map(|(&line, st)| PendingLine {
                    line,
                    flushed: st.flushed.is_some(),
                    dirty: st.dirty,
                    newest: self.current[self.line_range(line)].to_vec(),
                })
                .collect(),
        }
    }

    fn write(&mut self, offset: usize, data: &[u8]) -> Result<(), PmemError> {
        check_range(offset, data.len(), self.current.len())?;
        if data.is_empty() {
            return Ok(());
        }
        self.current[offset..offset + data.len()].copy_from_slice(data);
        for line in lines(offset, data.len()) {
            self.pending
                .entry(line)
                .or_insert(LineState {
                    flushed: None,
                    dirty: true,
                })
                .dirty = true;
        }
        Ok(())
    }
}

/// Indices of the cache lines touched by `[offset, offset + len)`.
fn lines(offset: usize, len: usize) -> core::ops::Range<usize> {
    if len == 0 {
        return 0..0;
    }
    offset / CACHE_LINE..(offset + len - 1) / CACHE_LINE + 1
}

/// Persistent memory simulated over a byte image, recording what a crash could leave.
/// See the [module docs](self).
pub struct Recorder {
    inner: Mutex<Inner>,
}

impl Recorder {
    /// A recorder of `len` zero bytes, all durable.
    pub fn new(len: usize) -> Self {
        Self::from_image(vec![0; len])
    }

    /// A recorder whose durable and current content is `image`, e.g. a crash image on which
    /// recovery is about to run (so recovery's own writes are recorded too).
    pub fn from_image(image: Vec<u8>) -> Self {
        Recorder {
            inner: Mutex::new(Inner {
                durable: image.clone(),
                current: image,
                pending: BTreeMap::new(),
                fences: 0,
                log_points: false,
                points: Vec::new(),
                hook: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic in another thread while holding the lock leaves the image consistent (every
        // mutation is completed before anything can panic), so recover from poisoning.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Turns on (or off) keeping a [`CrashState`] at every persistence point.
    pub fn record_points(&self, on: bool) {
        self.lock().log_points = on;
    }

    /// The states captured just before each fence since recording was turned on, oldest first.
    pub fn persistence_points(&self) -> Vec<CrashState> {
        self.lock().points.clone()
    }

    /// Calls `hook` with the state just before each fence. The hook runs without the
    /// recorder's lock held, but must not itself fence this recorder (it would not be called
    /// recursively).
    pub fn set_fence_hook(&self, hook: impl FnMut(&CrashState) + Send + 'static) {
        self.lock().hook = Some(Box::new(hook));
    }

    /// Removes the fence hook.
    pub fn clear_fence_hook(&self) {
        self.lock().hook = None;
    }

    /// The crash state right now (what a power failure at this instant could leave).
    pub fn snapshot(&self) -> CrashState {
        self.lock().state()
    }

    /// What survives a crash right now for sure (no pending line written back).
    pub fn durable_image(&self) -> Vec<u8> {
        self.lock().durable.clone()
    }

    /// The content a CPU reads right now.
    pub fn current_image(&self) -> Vec<u8> {
        self.lock().current.clone()
    }

    /// Number of fences (persistence points) so far.
    pub fn fences(&self) -> u64 {
        self.lock().fences
    }

    /// Number of pending (dirty or flushed-unfenced) cache lines.
    pub fn pending_lines(&self) -> usize {
        self.lock().pending.len()
    }
}

impl PersistMem for Recorder {
    fn len(&self) -> usize {
        self.lock().current.len()
    }

    fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), PmemError> {
        let g = self.lock();
        check_range(offset, buf.len(), g.current.len())?;
        buf.copy_from_slice(&g.current[offset..offset + buf.len()]);
        Ok(())
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<(), PmemError> {
        self.lock().write(offset, data)
    }

    fn flush(&self, offset: usize, len: usize) -> Result<(), PmemError> {
        let mut g = self.lock();
        check_range(offset, len, g.current.len())?;
        for line in lines(offset, len) {
            let range = g.line_range(line);
            let snapshot = g.current[range].to_vec();
            match g.pending.get_mut(&line) {
                Some(st) if st.dirty => {
                    st.flushed = Some(snapshot);
                    st.dirty = false;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn fence(&self) {
        let mut g = self.lock();
        let capture = g.log_points || g.hook.is_some();
        let state = capture.then(|| g.state());
        let inner = &mut *g;
        let mut done = Vec::new();
        for (&line, st) in inner.pending.iter_mut() {
            if let Some(content) = st.flushed.take() {
                let start = line * CACHE_LINE;
                inner.durable[start..start + content.len()].copy_from_slice(&content);
            }
            if !st.dirty {
                done.push(line);
            }
        }
        for line in done {
            inner.pending.remove(&line);
        }
        inner.fences += 1;
        let Some(state) = state else { return };
        let mut hook = inner.hook.take();
        if inner.log_points {
            inner.points.push(state.clone());
        }
        drop(g);
        if let Some(h) = hook.as_mut() {
            h(&state);
            let mut g = self.lock();
            if g.hook.is_none() {
                g.hook = hook;
            }
        }
    }

    fn load_u64(&self, offset: usize) -> Result<u64, PmemError> {
        let g = self.lock();
        check_word(offset, g.current.len())?;
        let mut b = [0u8; 8];
        b.copy_from_slice(&g.current[offset..offset + 8]);
        Ok(u64::from_le_bytes(b))
    }

    fn store_u64(&self, offset: usize, value: u64) -> Result<(), PmemError> {
        let mut g = self.lock();
        check_word(offset, g.current.len())?;
        g.write(offset, &value.to_le_bytes())
    }

    fn cas_u64(&self, offset: usize, expected: u64, new: u64) -> Result<u64, PmemError> {
        let mut g = self.lock();
        check_word(offset, g.current.len())?;
        let mut b = [0u8; 8];
        b.copy_from_slice(&g.current[offset..offset + 8]);
        let found = u64::from_le_bytes(b);
        if found == expected {
            g.write(offset, &new.to_le_bytes())?;
        }
        Ok(found)
    }
}

/// A cache line that may or may not have reached the media.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingLine {
    /// Line index (byte offset / 64).
    pub line: usize,
    /// A flush was issued but not fenced.
    pub flushed: bool,
    /// Written since its last flush.
    pub dirty: bool,
    /// The line's newest content (what it holds if it reached the media).
    pub newest: Vec<u8>,
}

/// What a crash at one moment could leave: the durable image plus the pending lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashState {
    fences_completed: u64,
    durable: Vec<u8>,
    pending: Vec<PendingLine>,
}

impl CrashState {
    /// Number of fences completed before this state; a state captured by the fence hook at
    /// fence number `k` (1-based) reports `k - 1`.
    pub fn fences_completed(&self) -> u64 {
        self.fences_completed
    }

    /// The image if no pending line reached the media.
    pub fn durable_image(&self) -> Vec<u8> {
        self.durable.clone()
    }

    /// The image if every pending line reached the media (the CPU's view).
    pub fn newest_image(&self) -> Vec<u8> {
        let all: Vec<usize> = (0..self.pending.len()).collect();
        self.image_with(&all)
    }

    /// The pending lines, by increasing line index.
    pub fn pending(&self) -> &[PendingLine] {
        &self.pending
    }

    /// Whether [`crash_images`](Self::crash_images) enumerates every subset.
    pub fn is_exhaustive(&self) -> bool {
        self.pending.len() <= EXHAUSTIVE_LIMIT
    }

    /// Image where the pending lines at positions `reached` (indices into
    /// [`pending`](Self::pending)) reached the media and the others did not.
    fn image_with(&self, reached: &[usize]) -> Vec<u8> {
        let mut img = self.durable.clone();
        for &i in reached {
            let p = &self.pending[i];
            let start = p.line * CACHE_LINE;
            img[start..start + p.newest.len()].copy_from_slice(&p.newest);
        }
        img
    }

    /// The crash images of this state: every subset of the pending lines when there are at
    /// most [`EXHAUSTIVE_LIMIT`] of them (`2^k` images, `max_samples` ignored), otherwise
    /// `max_samples` (at least 2) images: none, all, each line alone, all but each line, then
    /// random subsets drawn from `seed`. The same seed gives the same sequence.
    pub fn crash_images(&self, seed: u64, max_samples: usize) -> CrashImages<'_> {
        let k = self.pending.len();
        let (total, exhaustive) = if k <= EXHAUSTIVE_LIMIT {
            (1usize << k, true)
        } else {
            (max_samples.max(2), false)
        };
        CrashImages {
            state: self,
            next: 0,
            total,
            exhaustive,
            rng: SplitMix64(seed),
        }
    }
}

/// One crash image and which pending lines it includes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashImage {
    /// The full memory image after the crash.
    pub image: Vec<u8>,
    /// Line indices (byte offset / 64) of the pending lines that reached the media.
    pub reached_lines: Vec<usize>,
}

/// Iterator over the crash images of a [`CrashState`].
pub struct CrashImages<'a> {
    state: &'a CrashState,
    next: usize,
    total: usize,
    exhaustive: bool,
    rng: SplitMix64,
}

impl CrashImages<'_> {
    /// Positions (into the pending list) of the lines reaching the media in image `n`.
    fn subset(&mut self, n: usize) -> Vec<usize> {
        let k = self.state.pending.len();
        if self.exhaustive {
            return (0..k).filter(|i| n >> i & 1 == 1).collect();
        }
        match n {
            0 => Vec::new(),
            1 => (0..k).collect(),
            n if n < 2 + k => vec![n - 2],
            n if n < 2 + 2 * k => {
                let skip = n - 2 - k;
                (0..k).filter(|&i| i != skip).collect()
            }
            _ => (0..k).filter(|_| self.rng.next() & 1 == 1).collect(),
        }
    }
}

impl Iterator for CrashImages<'_> {
    type Item = CrashImage;

    fn next(&mut self) -> Option<CrashImage> {
        if self.next >= self.total {
            return None;
        }
        let n = self.next;
        self.next += 1;
        let subset = self.subset(n);
        Some(CrashImage {
            image: self.state.image_with(&subset),
            reached_lines: subset.iter().map(|&i| self.state.pending[i].line).collect(),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.total - self.next;
        (left, Some(left))
    }
}

impl ExactSizeIterator for CrashImages<'_> {}

/// Small deterministic PRNG (SplitMix64) for reproducible crash-image sampling.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
