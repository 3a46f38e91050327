//! Which operations overlapped a CANRT resize: the bench reads the resize clock of the
//! CANRT server it built itself (its [`ServerStats`], one per server, so one per tree;
//! [`ResizeClock`]) before and after each operation. With the memory node in another
//! process (`--connect`) there is no clock to read: the figures stay 0 and a note says so.
use super::index::IndexCfg;
use remora::core::canrt::{ResizeClock, ServerStats};
use std::sync::Arc;

/// The resize clock of the run's CANRT server, if the bench runs it.
#[derive(Debug, Clone, Default)]
pub struct ResizeWatch(Option<Arc<ServerStats>>);

impl ResizeWatch {
    pub fn of(stats: Arc<ServerStats>) -> ResizeWatch {
        ResizeWatch(Some(stats))
    }

    /// The clock now (None: not observed).
    pub fn now(&self) -> Option<ResizeClock> {
        self.0.as_ref().map(|s| s.resize_clock.now())
    }

    /// Whether an operation that read `start` and `end` overlapped a resize.
    pub fn overlapped(start: Option<ResizeClock>, end: Option<ResizeClock>) -> bool {
        matches!((start, end), (Some(s), Some(e)) if s.overlapped(e))
    }

    /// Why a CANRT run reports no operations during a resize, when it cannot see them.
    pub fn note(&self, index: &IndexCfg) -> Option<String> {
        (self.0.is_none() && matches!(index, IndexCfg::Canrt { .. })).then(|| {
            "ops during a resize: not observed (the CANRT server runs in the memory-node \
             process; the bench reads the resize clock of a server it runs itself)"
                .into()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use remora::core::canrt::CanrtServer;

    #[test]
    fn an_unobserved_clock_counts_nothing_and_says_so() {
        let wa = ResizeWatch::of(CanrtServer::new().stats());
        assert_eq!(wa.now(), Some(ResizeClock::default()));
        assert!(!ResizeWatch::overlapped(wa.now(), wa.now()));
        let busy = ResizeClock { begun: 1, ended: 0 };
        assert!(ResizeWatch::overlapped(Some(busy), wa.now()));
        assert!(!ResizeWatch::overlapped(None, None), "unobserved");
        assert_eq!(ResizeWatch::default().now(), None);
        let canrt = IndexCfg::Canrt {
            cfg: remora::core::canrt::CanrtConfig::default(),
            growth: Default::default(),
        };
        assert!(ResizeWatch::default().note(&canrt).is_some());
        assert!(wa.note(&canrt).is_none());
    }
}
