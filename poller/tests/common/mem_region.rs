//! A memory node's region in plain memory, for the tests that drive a server (or a tree) in
//! process without a fabric: bytes behind a lock, node 0, and an [`Observer`] that sees every
//! store and persist (to count bytes, log stores, or keep crash images).
//!
//! Included by the tests that use it (`#[path = "common/mem_region.rs"] mod mem_region;`).
#![allow(dead_code)] // Each test uses a part: the plain region, or crash images too.

use remora_core::NodeId;
use remora_core::fabric::FabricError;
use remora_core::server::LocalRegion;
use remora_layouts::region::RegionHeader;
use std::ops::Range;
use std::sync::Mutex;

/// What a test watches on its region. Both calls get the whole region as it is right after
/// the store, or at the persist, with the region's lock held.
pub trait Observer {
    /// `len` bytes at `offset` were stored (one [`LocalRegion::write`]).
    fn stored(&self, _mem: &[u8], _offset: usize, _len: usize) {}
    /// `[offset, offset + len)` is made durable (one [`LocalRegion::persist`]).
    fn persisted(&self, _mem: &[u8], _offset: u64, _len: usize) {}
}

/// Watches nothing.
impl Observer for () {}

/// The region: plain bytes, and the test's observer.
pub struct MemRegion<O = ()> {
    bytes: Mutex<Vec<u8>>,
    pub obs: O,
}

impl<O: Observer + Default> MemRegion<O> {
    /// `len` zero bytes behind a region header (64 KiB chunks, node 0).
    pub fn new(len: usize) -> Self {
        let mut b = vec![0u8; len];
        let h = RegionHeader::new(len as u64, 64 << 10, 0).unwrap();
        b[..128].copy_from_slice(&h.encode());
        Self::from_image(b)
    }
    /// A region holding `bytes` as they are (a crash image, or unformatted memory).
    pub fn from_image(bytes: Vec<u8>) -> Self {
        MemRegion {
            bytes: Mutex::new(bytes),
            obs: O::default(),
        }
    }
}

impl<O> MemRegion<O> {
    /// Every byte, the region given up.
    pub fn into_image(self) -> Vec<u8> {
        self.bytes.into_inner().unwrap()
    }
    /// A copy of every byte now.
    pub fn image(&self) -> Vec<u8> {
        self.bytes.lock().unwrap().clone()
    }
    /// The bytes `[off, off + len)`, or the out-of-range error a fabric gives for them.
    pub fn range(&self, off: u64, len: usize) -> Result<Range<usize>, FabricError> {
        let l = self.bytes.lock().unwrap().len();
        let o = usize::try_from(off).map_err(|_| remora_core::server::out_of_range(0, off, len))?;
        if o.checked_add(len).is_none_or(|e| e > l) {
            return Err(remora_core::server::out_of_range(0, off, len));
        }
        Ok(o..o + len)
    }
}

/// Runs `f` on `host` (a sim memory node's image, as its CPU sees it while no cluster runs)
/// as a region, then puts the bytes back.
pub fn on_image<R>(host: &mut Vec<u8>, f: impl FnOnce(&MemRegion) -> R) -> R {
    let region = MemRegion::from_image(std::mem::take(host));
    let r = f(&region);
    *host = region.into_image();
    r
}

impl<O: Observer> LocalRegion for MemRegion<O> {
    fn node(&self) -> NodeId {
        0
    }
    fn len(&self) -> u64 {
        self.bytes.lock().unwrap().len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        let r = self.range(offset, buf.len())?;
        buf.copy_from_slice(&self.bytes.lock().unwrap()[r]);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        let r = self.range(offset, data.len())?;
        let mut b = self.bytes.lock().unwrap();
        b[r.clone()].copy_from_slice(data);
        self.obs.stored(&b, r.start, data.len());
        Ok(())
    }
    fn persist(&self, offset: u64, len: usize) {
        self.obs.persisted(&self.bytes.lock().unwrap(), offset, len);
    }
}

/// While recording, the image at every persist (a crash right after that persistence point:
/// every store so far is durable there).
#[derive(Default)]
pub struct CrashImages(Mutex<Option<Vec<Vec<u8>>>>);

impl CrashImages {
    /// Starts recording crash images (`on`), or stops; returns the ones recorded so far.
    pub fn record(&self, on: bool) -> Vec<Vec<u8>> {
        let mut g = self.0.lock().unwrap();
        let taken = g.take().unwrap_or_default();
        if on {
            *g = Some(Vec::new());
        }
        taken
    }
}

impl Observer for CrashImages {
    fn persisted(&self, mem: &[u8], _offset: u64, _len: usize) {
        if let Some(images) = self.0.lock().unwrap().as_mut() {
            images.push(mem.to_vec());
        }
    }
}
