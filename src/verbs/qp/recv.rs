//! The receive side: posted receive buffers, their completions (SEND payloads and
//! WRITE_WITH_IMM immediates), and replenishment.
use super::{RECV_BATCH, RECV_LEN, RQ_DEPTH, VerbsQp};
use crate::verbs::error::{FailedOp, wc_error};
use crate::verbs::sys;
use remora_core::fabric::{FabricError, Recv, RecvKind};
use remora_layouts::GlobalAddr;
use std::future::Future;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};

impl VerbsQp {
    /// Posts every consumed receive buffer again, as chains of up to [`RECV_BATCH`].
    pub(super) fn post_recvs(&self) -> Result<(), ()> {
        let mut pending = self.repost.borrow_mut();
        for chunk in pending.chunks(RECV_BATCH) {
            let mut sges = [sys::ibv_sge::default(); RECV_BATCH];
            let mut wrs = [const { MaybeUninit::<sys::ibv_recv_wr>::uninit() }; RECV_BATCH];
            let wr_ptr = wrs.as_mut_ptr().cast::<sys::ibv_recv_wr>();
            for (k, &i) in chunk.iter().enumerate() {
                sges[k] = sys::ibv_sge {
                    // SAFETY: buffer `i < RQ_DEPTH` of the receive arena (RQ_DEPTH buffers of
                    // RECV_LEN bytes).
                    addr: unsafe { self.recv_base.get().add(i as usize * RECV_LEN) } as u64,
                    length: RECV_LEN as u32,
                    lkey: self.recv_lkey.get(),
                };
                wrs[k].write(sys::ibv_recv_wr {
                    wr_id: u64::from(i),
                    next: if k + 1 == chunk.len() {
                        std::ptr::null_mut()
                    } else {
                        // SAFETY: k + 1 < RECV_BATCH: inside the array.
                        unsafe { wr_ptr.add(k + 1) }
                    },
                    sg_list: &mut sges[k],
                    num_sge: 1,
                });
            }
            let mut bad = std::ptr::null_mut();
            // The chain's first `chunk.len()` entries are written and linked, and they and their scatter entries are valid for the call (the
            // provider copies them); the buffers are registered and owned by this queue pair
            // and the NIC is done with them (their completions were reaped).
            let rc = self.post_recv(wr_ptr, &mut bad);
            self.stats.bump(|v| {
                v.recv_posts += 1;
                v.recvs_posted += chunk.len() as u64;
            });
            if rc != 0 {
                return Err(());
            }
        }
        pending.clear();
        Ok(())
    }

    /// Polls the receive completion queue once: its next completion, if one is there.
    pub(super) fn reap_recv(&self) -> Result<Option<sys::ibv_wc>, FabricError> {
        let mut wc = MaybeUninit::<sys::ibv_wc>::uninit();
        let n = self.poll_recv_cq(wc.as_mut_ptr());
        self.stats.bump(|v| {
            v.recv_polls += 1;
            v.recv_empty += u64::from(n == 0);
            v.recv_completions += u64::from(n > 0);
        });
        if n < 0 {
            self.broken.set(true);
            return Err(FabricError::Unsupported {
                what: "polling the receive completion queue failed",
            });
        }
        if n == 0 {
            return if self.broken.get() {
                Err(self.flushed())
            } else {
                Ok(None)
            };
        }
        self.raw.send.touch();
        // SAFETY: ibv_poll_cq returned 1, so the entry is initialized.
        Ok(Some(unsafe { wc.assume_init() }))
    }

    /// The next receive completion if one is there (see `QueuePair::try_recv`): the one the
    /// thread's progress hook reaped for a receive wait, else a poll's.
    pub(super) fn poll_recv(&self, buf: &mut [u8]) -> Result<Option<Recv>, FabricError> {
        self.ensure_recvs()?;
        let wc = match self.recv_stash.take() {
            Some(wc) => wc,
            None => match self.reap_recv()? {
                Some(wc) => wc,
                None => return Ok(None),
            },
        };
        if wc.status != sys::IBV_WC_SUCCESS {
            self.note_failure(wc.status);
            self.counters.count_error();
            if wc.status == sys::IBV_WC_WR_FLUSH_ERR {
                return Err(self.flushed());
            }
            return Err(wc_error(
                wc.status,
                FailedOp {
                    wr: 0,
                    addr: GlobalAddr::NULL,
                    len: wc.byte_len as usize,
                },
                self.peer,
            ));
        }
        let i = wc.wr_id as usize % RQ_DEPTH as usize;
        let len = wc.byte_len as usize;
        let r = if wc.opcode == sys::IBV_WC_RECV_RDMA_WITH_IMM {
            // SAFETY: the union member the provider sets for completions with immediates.
            let imm = u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data });
            self.counters.count_recv(0);
            Ok(Some(Recv {
                kind: RecvKind::WriteImm,
                len: wc.byte_len,
                imm: Some(imm),
            }))
        } else if len > buf.len() {
            Err(FabricError::LocalLength {
                wr: 0,
                len,
                max: buf.len(),
            })
        } else {
            // SAFETY: the completion says the NIC is done with receive buffer `i`, which holds
            // `len <= RECV_LEN` bytes; `buf` is a distinct slice with room for them.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.recv_base.get().add(i * RECV_LEN),
                    buf.as_mut_ptr(),
                    len,
                )
            };
            self.counters.count_recv(len);
            Ok(Some(Recv {
                kind: RecvKind::Send,
                len: wc.byte_len,
                imm: None,
            }))
        };
        let full = {
            let mut pending = self.repost.borrow_mut();
            pending.push(i as u32);
            pending.len() >= RECV_BATCH
        };
        if full && self.post_recvs().is_err() {
            self.broken.set(true);
        }
        r
    }
}

/// The future of [`VerbsQp`]'s [`QueuePair::recv`](remora_core::fabric::QueuePair::recv).
pub struct RecvFuture<'q, 'a> {
    qp: &'q VerbsQp,
    buf: &'a mut [u8],
    /// Counted among its queue pair's receive waits.
    waiting: bool,
    /// Its entry in the queue pair's table of receive wakers (see `wake.rs`).
    entry: Option<u8>,
}

impl<'q, 'a> RecvFuture<'q, 'a> {
    pub(super) fn new(qp: &'q VerbsQp, buf: &'a mut [u8]) -> Self {
        RecvFuture {
            qp,
            buf,
            waiting: false,
            entry: None,
        }
    }

    fn stop_waiting(&mut self) {
        self.qp.leave_recv(&mut self.entry);
        if std::mem::take(&mut self.waiting) {
            self.qp.remove_recv_waiter();
        }
    }
}

impl Future for RecvFuture<'_, '_> {
    type Output = Result<Recv, FabricError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match this.qp.poll_recv(this.buf) {
            Ok(Some(r)) => {
                this.stop_waiting();
                Poll::Ready(Ok(r))
            }
            Err(e) => {
                this.stop_waiting();
                Poll::Ready(Err(e))
            }
            // Waits for the thread's progress hook to see its receive queue's next
            // completion and wake it (`VerbsQp::recv_round`). Send completions are reaped by
            // that hook too while posts wait; a failed send moves the queue pair to the error
            // state, which flushes the posted receives, so this wait still ends with an error.
            // As a backstop for a provider slow to flush them, a long wait drains the send
            // queue once every `SEND_POLL_EVERY` empty rounds. Without an executor that runs
            // the hook, it polls for itself, waking itself each time.
            Ok(None) => {
                if !this.waiting {
                    this.waiting = true;
                    this.qp.add_recv_waiter();
                }
                if !this.qp.wait_recv(&mut this.entry, cx.waker()) {
                    this.qp.recv_idle_tick();
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for RecvFuture<'_, '_> {
    fn drop(&mut self) {
        self.stop_waiting();
    }
}
