//! The floor loop: the data path's cost without futures, slots, staging or dispatch.
use super::VerbsQp;
use crate::verbs::sys;
use remora_core::fabric::FabricError;

impl VerbsQp {
    /// The floor of the data path, to measure the rest against: `ops` times `per_op` READs
    /// of `size` bytes from the peer's region (at `offset`) into `buf`, each one work
    /// request posted straight to the device and its completion polled straight from the
    /// completion queue: no futures, slots, staging or dispatch. `buf` must lie in this
    /// queue pair's registered ranges, and nothing may be in flight on its completion queue.
    pub fn floor_loop(
        &self,
        ops: u64,
        per_op: u32,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), FabricError> {
        let Some(lkey) = self.pool_lkey(buf.as_ptr(), buf.len()) else {
            return Err(FabricError::Unsupported {
                what: "the floor loop reads into registered memory only",
            });
        };
        if self.raw.send.waiters.get() != 0 || self.sq_used.get() != 0 {
            return Err(FabricError::Unsupported {
                what: "the floor loop needs an idle queue pair",
            });
        }
        let (raddr, rkey) = self
            .remote
            .target(remora_layouts::GlobalAddr::new(self.peer, offset));
        let mut sge = sys::ibv_sge {
            addr: buf.as_mut_ptr() as u64,
            length: buf.len() as u32,
            lkey,
        };
        let mut wr = sys::ibv_send_wr {
            wr_id: u64::MAX,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: sys::IBV_WR_RDMA_READ,
            send_flags: sys::IBV_SEND_SIGNALED,
            ..Default::default()
        };
        wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
            remote_addr: raddr,
            rkey,
        };
        let mut wc = std::mem::MaybeUninit::<sys::ibv_wc>::uninit();
        let mut bad = std::ptr::null_mut();
        for _ in 0..ops * u64::from(per_op) {
            if self.post_send(&mut wr, &mut bad) != 0 {
                return Err(FabricError::Unsupported {
                    what: "the device refused the floor loop's READ",
                });
            }
            loop {
                let n = self.raw.send.poll(1, wc.as_mut_ptr());
                if n < 0 {
                    return Err(FabricError::Unsupported {
                        what: "polling the completion queue failed",
                    });
                }
                if n == 1 {
                    // SAFETY: one completion written by the poll.
                    if unsafe { wc.assume_init_ref() }.status != sys::IBV_WC_SUCCESS {
                        self.broken.set(true);
                        return Err(FabricError::Flushed);
                    }
                    break;
                }
            }
        }
        Ok(())
    }
}
