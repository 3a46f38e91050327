//! Per-verb traces: what happened to the chosen operations, with virtual times.
//!
//! Operations (posted batches) are numbered in posting order from 0 across the whole
//! simulation. A trace selects a range of numbers; every event of those batches (post, wire
//! times, admission at the responder, each segment applied or sampled, atomics, receive
//! completions, the response and the completion) becomes one line, kept in memory
//! ([`crate::sim::Sim::trace_lines`]) and optionally printed to stderr as it happens.
//! Faults (node crashes) are traced whenever tracing is on.
use super::model::Ps;

/// Which batches to trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceSel {
    /// Number of the first traced batch (batches are numbered in posting order from 0).
    pub first: u64,
    /// How many consecutive batches from `first` are traced.
    pub count: u64,
    /// Also print each line to stderr as it happens (besides keeping it).
    pub stderr: bool,
}

impl TraceSel {
    /// Trace batch number `n` only.
    pub fn op(n: u64) -> TraceSel {
        TraceSel {
            first: n,
            count: 1,
            stderr: false,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Trace {
    sel: Option<TraceSel>,
    pub lines: Vec<String>,
}

/// `1234567` ps as `"1234.567ns"`.
pub(crate) fn fmt_ps(t: Ps) -> String {
    format!("{}.{:03}ns", t / 1000, t % 1000)
}

impl Trace {
    pub fn new(sel: Option<TraceSel>) -> Trace {
        Trace {
            sel,
            lines: Vec::new(),
        }
    }
    pub fn enabled(&self) -> bool {
        self.sel.is_some()
    }
    pub fn wants(&self, number: u64) -> bool {
        match self.sel {
            Some(s) => number == u64::MAX || (number >= s.first && number - s.first < s.count),
            None => false,
        }
    }
    pub fn line(&mut self, now: Ps, number: u64, text: String) {
        if !self.wants(number) {
            return;
        }
        let l = if number == u64::MAX {
            format!("[{:>16}] {text}", fmt_ps(now))
        } else {
            format!("[{:>16}] op#{number} {text}", fmt_ps(now))
        };
        if self.sel.is_some_and(|s| s.stderr) {
            eprintln!("{l}");
        }
        self.lines.push(l);
    }
}
