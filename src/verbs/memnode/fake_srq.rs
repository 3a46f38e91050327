//! A shared receive queue on the fake device: the memory node's server thread runs its own
//! loop (`shard.rs`) and idle sleep (`idle.rs`) over it, while another thread plays the NIC
//! and lands clients' SENDs in its posted buffers ([`Srq::fake_deliver`]). Unlike `fake.rs`,
//! whose node serves in the client's post, this one is shared between threads: a mutex
//! stands in for the NIC's ordering, an eventfd for the completion channel (written when a
//! completion lands on an armed queue, as `ibv_req_notify_cq` asks).
use super::idle::Bell;
use super::shard::SRQ_DEPTH;
use crate::verbs::sys;
use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::sync::Mutex;

/// The queue's device side (built by the tests only: [`Srq::fake`]).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct FakeSrq {
    q: Mutex<Queues>,
    channel: Bell,
}

#[derive(Default)]
struct Queues {
    /// Buffers posted, in order.
    posted: VecDeque<u32>,
    /// Receive completions not yet polled: (buffer, bytes, queue pair number).
    done: VecDeque<(u32, u32, u32)>,
    /// The next completion raises an event.
    armed: bool,
}

impl FakeSrq {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.q.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `ibv_poll_cq`: completions into the first entries of `out`; how many.
    pub(super) fn poll(&self, out: &mut [MaybeUninit<sys::ibv_wc>]) -> i32 {
        let mut q = self.lock();
        let mut k = 0;
        for o in out.iter_mut() {
            let Some((buf, len, qp_num)) = q.done.pop_front() else {
                break;
            };
            let wc = sys::ibv_wc {
                wr_id: u64::from(buf),
                status: sys::IBV_WC_SUCCESS,
                opcode: sys::IBV_WC_RECV,
                byte_len: len,
                qp_num,
                ..Default::default()
            };
            o.write(wc);
            k += 1;
        }
        k
    }

    /// `ibv_post_srq_recv` of `bufs`.
    pub(super) fn post(&self, bufs: &[u32]) -> i32 {
        self.lock()
            .posted
            .extend(bufs.iter().map(|b| b % SRQ_DEPTH));
        0
    }

    /// `ibv_req_notify_cq`.
    pub(super) fn arm(&self) {
        self.lock().armed = true;
    }

    /// The channel's fd.
    pub(super) fn fd(&self) -> i32 {
        self.channel.fd()
    }

    /// Reads the channel: whether an event was raised.
    pub(super) fn take_event(&self) -> bool {
        self.channel.drain()
    }
}

/// Building and feeding one (the tests').
#[cfg(test)]
mod nic {
    use super::*;
    use crate::verbs::arena::Arena;
    use crate::verbs::error::VerbsError;
    use crate::verbs::memnode::shard::Srq;
    use crate::verbs::qp::RECV_LEN;

    impl Srq {
        /// A shared receive queue on the fake device, all its buffers posted.
        pub(crate) fn fake() -> Result<Srq, VerbsError> {
            let fake = FakeSrq {
                q: Mutex::new(Queues::default()),
                channel: Bell::new()?,
            };
            fake.post(&(0..SRQ_DEPTH).collect::<Vec<_>>());
            Ok(Srq::with_fake(
                fake,
                Arena::new(SRQ_DEPTH as usize * RECV_LEN)?,
            ))
        }

        /// The NIC's side: a SEND of `msg` from queue pair `qp_num` lands in the next posted
        /// buffer. False (nothing delivered) when no buffer is posted, the message is longer
        /// than a buffer, or this is not a fake queue.
        pub(crate) fn fake_deliver(&self, qp_num: u32, msg: &[u8]) -> bool {
            let Some(f) = &self.fake else {
                return false;
            };
            if msg.len() > RECV_LEN {
                return false;
            }
            let mut q = f.lock();
            let Some(buf) = q.posted.pop_front() else {
                return false;
            };
            // SAFETY: a posted buffer (the server thread does not read it until it polls the
            // completion pushed below, under the same lock) of RECV_LEN >= msg.len() bytes.
            unsafe { std::ptr::copy_nonoverlapping(msg.as_ptr(), self.buf(buf), msg.len()) };
            q.done.push_back((buf, msg.len() as u32, qp_num));
            if std::mem::take(&mut q.armed) {
                f.channel.ring();
            }
            true
        }
    }
}
