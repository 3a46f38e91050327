//! Protection domains and memory registrations, released on drop.
use super::error::{VerbsError, errno, sys_err};
use super::sys;

/// Access a memory region grants: local writes (READ targets, receives, atomic results) and,
/// for a memory node's regions, remote READ, WRITE and atomics.
pub(crate) const LOCAL: u32 = sys::IBV_ACCESS_LOCAL_WRITE;
pub(crate) const REMOTE: u32 = sys::IBV_ACCESS_LOCAL_WRITE
    | sys::IBV_ACCESS_REMOTE_READ
    | sys::IBV_ACCESS_REMOTE_WRITE
    | sys::IBV_ACCESS_REMOTE_ATOMIC;

/// A protection domain; deallocated on drop when owned.
pub(crate) struct Pd {
    raw: *mut sys::ibv_pd,
    owned: bool,
}

impl Pd {
    pub fn alloc(ctx: *mut sys::ibv_context) -> Result<Pd, VerbsError> {
        // SAFETY: `ctx` is an open device context; the result is checked for null.
        let raw = unsafe { sys::ibv_alloc_pd(ctx) };
        if raw.is_null() {
            return Err(sys_err("ibv_alloc_pd"));
        }
        Ok(Pd { raw, owned: true })
    }

    /// A handle to a protection domain someone else owns and keeps alive longer.
    pub fn borrowed(&self) -> Pd {
        Pd {
            raw: self.raw,
            owned: false,
        }
    }

    pub fn raw(&self) -> *mut sys::ibv_pd {
        self.raw
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: owned PD; its users (QPs, MRs) are released before by their owners.
            unsafe { sys::ibv_dealloc_pd(self.raw) };
        }
    }
}

/// A registered memory region.
pub(crate) struct Mr(*mut sys::ibv_mr);

impl Mr {
    /// Registers `[ptr, ptr + len)` with `access`.
    ///
    /// # Safety
    /// The memory must stay mapped until the returned value is dropped.
    pub unsafe fn register(
        pd: &Pd,
        ptr: *mut u8,
        len: usize,
        access: u32,
    ) -> Result<Mr, VerbsError> {
        // SAFETY: the caller keeps the memory mapped for the registration's lifetime.
        let mr = unsafe { sys::ibv_reg_mr(pd.raw(), ptr.cast(), len, access as i32) };
        if mr.is_null() {
            return Err(VerbsError::Register {
                bytes: len,
                errno: errno(),
            });
        }
        Ok(Mr(mr))
    }

    /// Wraps a registration made elsewhere (device memory), released on drop.
    pub fn from_raw(mr: *mut sys::ibv_mr) -> Mr {
        Mr(mr)
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: a live registration.
        unsafe { (*self.0).lkey }
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: a live registration.
        unsafe { (*self.0).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: deregisters once; the owner drops it before unmapping the memory.
        unsafe { sys::ibv_dereg_mr(self.0) };
    }
}
