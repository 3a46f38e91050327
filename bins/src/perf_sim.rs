//! `remora perf --fabric sim` (being written: issue 3).
use crate::args::PerfArgs;
use crate::report::PerfRecord;

pub fn run(_a: &PerfArgs) -> Result<Vec<PerfRecord>, String> {
    Err("the sim fabric is not in this build yet".into())
}

pub fn check(_a: &PerfArgs) -> Result<(), String> {
    Err("the sim fabric is not in this build yet".into())
}
