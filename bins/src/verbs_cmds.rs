//! `--fabric verbs` commands (being written: issue 4).
use crate::MemnodeArgs;
use crate::args::PerfArgs;
use crate::report::PerfRecord;

pub fn perf(_a: &PerfArgs) -> Result<Vec<PerfRecord>, String> {
    Err("this build has no verbs fabric".into())
}

pub fn memnode(_a: &MemnodeArgs) -> Result<(), String> {
    Err("this build has no verbs fabric".into())
}

pub fn check(_a: &PerfArgs) -> Result<(), String> {
    Err("this build has no verbs fabric".into())
}
