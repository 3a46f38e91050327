//! The work-request chain of a post: [`MAX_BATCH`] send work requests and their scatter
//! entries, allocated once per queue pair and zeroed then, and filled field by field in place
//! on each post (only the fields the op's opcode uses; the others stay zero). Assembling a
//! whole `ibv_send_wr` (128 bytes, mostly zero) per op and copying it in stalled on its
//! narrow stores: a quarter of the post's CPU on the fake device.
use super::MAX_BATCH;
use crate::verbs::sys;
use remora_core::fabric::Op;

/// A queue pair's chain (behind its `RefCell`: one post builds it at a time).
pub(super) struct Chain {
    wrs: Box<[sys::ibv_send_wr]>,
    sges: Box<[sys::ibv_sge]>,
}

/// One work request's local bytes: (address, length, local key).
pub(super) type Sge = (u64, u32, u32);

impl Chain {
    pub(super) fn new() -> Chain {
        Chain {
            wrs: vec![sys::ibv_send_wr::default(); MAX_BATCH].into_boxed_slice(),
            sges: vec![sys::ibv_sge::default(); MAX_BATCH].into_boxed_slice(),
        }
    }

    /// Sets work request `i` (< [`MAX_BATCH`]) to `op` on the remote `(address, key)`,
    /// with its local bytes `sge` (none when the length is 0) and `send_flags` (inline,
    /// signaled).
    #[inline(always)]
    pub(super) fn set(
        &mut self,
        i: usize,
        wr_id: u64,
        op: &Op<'_>,
        sge: Sge,
        remote: (u64, u32),
        send_flags: u32,
    ) {
        let s = &mut self.sges[i];
        (s.addr, s.length, s.lkey) = sge;
        let w = &mut self.wrs[i];
        w.wr_id = wr_id;
        w.num_sge = i32::from(sge.1 > 0);
        w.send_flags = send_flags;
        let (remote_addr, rkey) = remote;
        let rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
        w.__bindgen_anon_1.imm_data = 0;
        match op {
            Op::Read { .. } => {
                w.opcode = sys::IBV_WR_RDMA_READ;
                w.wr.rdma = rdma;
            }
            Op::Write { .. } => {
                w.opcode = sys::IBV_WR_RDMA_WRITE;
                w.wr.rdma = rdma;
            }
            Op::WriteImm { imm, .. } => {
                w.opcode = sys::IBV_WR_RDMA_WRITE_WITH_IMM;
                w.wr.rdma = rdma;
                w.__bindgen_anon_1.imm_data = imm.to_be();
            }
            // A masked CAS never gets here: `start` refuses it (no extended atomics).
            Op::Cas { compare, swap, .. } | Op::MaskedCas { compare, swap, .. } => {
                w.opcode = sys::IBV_WR_ATOMIC_CMP_AND_SWP;
                w.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                    remote_addr,
                    compare_add: *compare,
                    swap: *swap,
                    rkey,
                };
            }
            Op::Faa { add, .. } => {
                w.opcode = sys::IBV_WR_ATOMIC_FETCH_AND_ADD;
                w.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                    remote_addr,
                    compare_add: *add,
                    swap: 0,
                    rkey,
                };
            }
            Op::Send { .. } => w.opcode = sys::IBV_WR_SEND,
        }
    }

    /// The `wr_id` of work request `i` as last set.
    pub(super) fn wr_id(&self, i: usize) -> u64 {
        self.wrs[i].wr_id
    }

    /// Links work requests `0..n` (1 <= n <= [`MAX_BATCH`]) into a chain, each to its scatter
    /// entry; returns its head, valid while this borrow of the chain lasts.
    #[inline(always)]
    pub(super) fn link(&mut self, n: usize) -> *mut sys::ibv_send_wr {
        let wr_ptr = self.wrs.as_mut_ptr();
        let sge_ptr = self.sges.as_mut_ptr();
        for i in 0..n {
            // SAFETY: i < n <= MAX_BATCH: inside both arrays; i + 1 <= n is at most one past
            // the end, and only taken when i + 1 < n.
            unsafe {
                let w = &mut *wr_ptr.add(i);
                w.sg_list = sge_ptr.add(i);
                w.next = if i + 1 == n {
                    std::ptr::null_mut()
                } else {
                    wr_ptr.add(i + 1)
                };
            }
        }
        wr_ptr
    }
}
