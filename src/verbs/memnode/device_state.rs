//! Per-device state of the verbs memory node: the region's registration, the device memory
//! (the NIC's on-chip memory, or host memory standing in for it), and the welcome a client
//! gets in the accept.
use super::*;

impl Memnode {
    /// The per-device state for `ctx`, set up on first use.
    pub(super) fn device(&mut self, ctx: *mut sys::ibv_context) -> Result<usize, VerbsError> {
        if let Some(i) = self.devs.iter().position(|d| d.ctx == ctx) {
            return Ok(i);
        }
        let name = context_name(ctx);
        if let Some(want) = &self.cfg.device
            && *want != name
        {
            return Err(VerbsError::WrongDevice {
                addr: self.cfg.listen.clone(),
                via: name,
                wanted: want.clone(),
            });
        }
        let (_, rd, init_rd, max_dm) = limits(ctx)?;
        let pd = Pd::alloc(ctx)?;
        // SAFETY: the region arena outlives every device state (field order of Memnode).
        let region_mr = unsafe {
            Mr::register(
                &pd,
                self.region.as_ptr(),
                self.cfg.region_len as usize,
                REMOTE,
            )?
        };
        let dm = self.device_memory(ctx, &pd, max_dm)?;
        let srqs = (0..self.hub.threads())
            .map(|_| Srq::new(ctx, &pd).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        self.devs.push(DevState {
            ctx,
            srqs,
            region_mr,
            dm,
            pd,
            rd,
            init_rd,
        });
        Ok(self.devs.len() - 1)
    }

    fn device_memory(
        &mut self,
        ctx: *mut sys::ibv_context,
        pd: &Pd,
        max_dm: u64,
    ) -> Result<Dm, VerbsError> {
        let len = self.cfg.dm_len;
        if len == 0 {
            return Ok(Dm::None);
        }
        if max_dm >= len {
            let mut attr = sys::ibv_alloc_dm_attr {
                length: len as usize,
                log_align_req: 3,
                comp_mask: 0,
            };
            // SAFETY: open context; `attr` valid for the call; the result is checked.
            let dm = unsafe { sys::ibv_alloc_dm(ctx, &mut attr) };
            if !dm.is_null() {
                let zeros = vec![0u8; len as usize];
                // SAFETY: `dm` has `len` bytes; `zeros` is a readable buffer of that size.
                let rc =
                    unsafe { sys::ibv_memcpy_to_dm(dm, 0, zeros.as_ptr().cast(), len as usize) };
                // SAFETY: registers the whole device memory, zero-based, for remote access.
                let mr = unsafe {
                    sys::ibv_reg_dm_mr(
                        pd.raw(),
                        dm,
                        0,
                        len as usize,
                        REMOTE | sys::IBV_ACCESS_ZERO_BASED,
                    )
                };
                if rc == 0 && !mr.is_null() {
                    return Ok(Dm::Device(DeviceMem {
                        mr: Some(Mr::from_raw(mr)),
                        dm,
                    }));
                }
                if !mr.is_null() {
                    drop(Mr::from_raw(mr));
                }
                // SAFETY: not registered (any registration was released just above).
                unsafe { sys::ibv_free_dm(dm) };
            }
        }
        let arena = match self.dm_host.take() {
            Some(a) => a,
            None => Arena::new(len as usize)?,
        };
        // SAFETY: the host stand-in arena outlives every device state (field order).
        let mr = unsafe { Mr::register(pd, arena.as_ptr(), len as usize, REMOTE) };
        self.dm_host = Some(arena);
        Ok(Dm::Host { mr: mr? })
    }

    pub(super) fn welcome(&self, dev: &DevState, client: u32) -> Welcome {
        let (dm_kind, dm_addr, dm_rkey, dm_len) = match &dev.dm {
            Dm::None => (DmKind::None, 0, 0, 0),
            Dm::Device(d) => (
                DmKind::Device,
                0,
                d.mr.as_ref().map_or(0, Mr::rkey),
                self.cfg.dm_len,
            ),
            Dm::Host { mr } => (
                DmKind::Host,
                self.dm_host.as_ref().map_or(0, |a| a.as_ptr() as u64),
                mr.rkey(),
                self.cfg.dm_len,
            ),
        };
        Welcome {
            node: self.cfg.node,
            recv_len: RECV_LEN as u32,
            region_addr: self.region.as_ptr() as u64,
            region_rkey: dev.region_mr.rkey(),
            region_len: self.cfg.region_len,
            dm_kind,
            dm_addr,
            dm_rkey,
            dm_len,
            service: service_bytes(self.service),
            client,
        }
    }
}
