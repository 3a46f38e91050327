//! The device calls under a queue pair: `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq` on
//! its receive queue and `ibv_modify_qp`, over rdma-core or the fake device.
use super::{Dev, MIN_RNR_TIMER, VerbsQp};
use crate::verbs::sys;

impl VerbsQp {
    /// Sets the receiver-not-ready timer this side advertises ([`MIN_RNR_TIMER`]) instead of
    /// rdma_cm's 0 (which IB reads as 655 ms), see [`set_min_rnr_timer`]. Returns whether the
    /// queue pair now has it.
    pub(crate) fn set_min_rnr_timer(&self) -> bool {
        match &self.dev {
            Dev::Real(qp) => set_min_rnr_timer(*qp),
            Dev::Fake(_) => true,
        }
    }

    pub(super) fn to_error_state(&self) {
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_ERR,
            ..Default::default()
        };
        match &self.dev {
            // SAFETY: a live queue pair; moving it to the error state is always allowed.
            Dev::Real(qp) => unsafe {
                sys::ibv_modify_qp(*qp, &mut attr, sys::IBV_QP_STATE as i32);
            },
            Dev::Fake(f) => f.to_error(),
        }
    }

    /// `ibv_post_send` on this queue pair's device.
    #[inline]
    pub(super) fn post_send(
        &self,
        wr: *mut sys::ibv_send_wr,
        bad: &mut *mut sys::ibv_send_wr,
    ) -> i32 {
        self.raw.send.touch();
        match &self.dev {
            // SAFETY: a live queue pair; the caller's chain is valid for the call.
            Dev::Real(qp) => unsafe { sys::ibv_post_send(*qp, wr, bad) },
            Dev::Fake(f) => match self.raw.send.fake_cq() {
                Some(cq) => f.post_send(wr, cq),
                None => -libc::EINVAL,
            },
        }
    }

    /// `ibv_post_recv` on this queue pair's device.
    #[inline]
    pub(super) fn post_recv(
        &self,
        wr: *mut sys::ibv_recv_wr,
        bad: &mut *mut sys::ibv_recv_wr,
    ) -> i32 {
        match &self.dev {
            // SAFETY: a live queue pair; the caller's chain is valid for the call.
            Dev::Real(qp) => unsafe { sys::ibv_post_recv(*qp, wr, bad) },
            Dev::Fake(f) => f.post_recv(wr),
        }
    }

    /// `ibv_poll_cq` on this queue pair's receive completion queue.
    #[inline]
    pub(super) fn poll_recv_cq(&self, wc: *mut sys::ibv_wc) -> i32 {
        match &self.dev {
            // SAFETY: a live CQ; room for one completion at `wc` (the caller's).
            Dev::Real(_) => unsafe { sys::ibv_poll_cq(self.raw.recv_cq, 1, wc) },
            Dev::Fake(f) => f.poll_recv(wc),
        }
    }
}

/// Sets queue pair `qp`'s receiver-not-ready timer to [`MIN_RNR_TIMER`] (a move from RTS to
/// RTS: a queue pair not yet in RTS, or whose device refuses, keeps rdma_cm's default) and
/// reads it back: true when the queue pair has it. `qp` must be live; libibverbs allows the
/// call from any thread.
pub(crate) fn set_min_rnr_timer(qp: *mut sys::ibv_qp) -> bool {
    let mut attr = sys::ibv_qp_attr {
        qp_state: sys::IBV_QPS_RTS,
        min_rnr_timer: MIN_RNR_TIMER,
        ..Default::default()
    };
    let mask = sys::IBV_QP_STATE | sys::IBV_QP_MIN_RNR_TIMER;
    // SAFETY: a live queue pair (the caller's); `attr` is valid for the call.
    if unsafe { sys::ibv_modify_qp(qp, &mut attr, mask as i32) } != 0 {
        return false;
    }
    let mut got = sys::ibv_qp_attr::default();
    let mut init = sys::ibv_qp_init_attr::default();
    // SAFETY: as above; both structs are valid outputs for the call.
    let rc = unsafe {
        sys::ibv_query_qp(
            qp,
            &mut got,
            (sys::IBV_QP_STATE | sys::IBV_QP_MIN_RNR_TIMER) as i32,
            &mut init,
        )
    };
    rc == 0 && got.min_rnr_timer == MIN_RNR_TIMER
}
