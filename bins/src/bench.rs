//! `remora bench`: the YCSB driver (issue 5).
use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {}

pub fn run(_a: &BenchArgs) -> Result<(), String> {
    Err("no index is in this build yet".into())
}
