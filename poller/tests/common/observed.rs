//! A Catfish server that publishes, after every request, how many messages its threads have
//! handled and how many reply messages they hold back (flow control), so a test can wait
//! for a server step instead of sleeping and hoping it came.
use remora_core::catfish::CatfishServer;
use remora_core::fabric::{FabricError, Recv};
use remora_core::server::{Handler, LocalRegion, Replies};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters shared by every thread of an [`Observed`] server.
#[derive(Default)]
pub struct Published {
    /// Messages handled, all threads.
    pub handled: AtomicU64,
    /// Reply messages queued for clients that have not asked for them yet, all threads.
    pub queued: AtomicU64,
}

pub struct Observed {
    inner: CatfishServer,
    out: Arc<Published>,
    /// This thread's share of `out.queued`.
    queued: u64,
}

impl Observed {
    pub fn new(inner: CatfishServer) -> (Observed, Arc<Published>) {
        let out = Arc::new(Published::default());
        let s = Observed {
            inner,
            out: out.clone(),
            queued: 0,
        };
        (s, out)
    }

    fn publish(&mut self) {
        let q = self.inner.queued_replies() as u64;
        if q >= self.queued {
            self.out.queued.fetch_add(q - self.queued, Ordering::AcqRel);
        } else {
            self.out.queued.fetch_sub(self.queued - q, Ordering::AcqRel);
        }
        self.queued = q;
    }
}

impl Handler for Observed {
    fn on_message(
        &mut self,
        region: &dyn LocalRegion,
        conn: usize,
        recv: Recv,
        msg: &[u8],
        replies: &mut Replies,
    ) -> Result<(), FabricError> {
        let r = self.inner.on_message(region, conn, recv, msg, replies);
        self.publish();
        self.out.handled.fetch_add(1, Ordering::AcqRel);
        r
    }
    fn on_idle(&mut self, region: &dyn LocalRegion) -> bool {
        self.inner.on_idle(region)
    }
    fn on_disconnect(&mut self, region: &dyn LocalRegion, conn: usize) {
        self.inner.on_disconnect(region, conn);
        self.publish();
    }
    fn service(&self) -> &'static str {
        self.inner.service()
    }
    fn fork(&mut self) -> Option<Box<dyn Handler + Send>> {
        Some(Box::new(Observed {
            inner: self.inner.thread(),
            out: self.out.clone(),
            queued: 0,
        }))
    }
}
