//! Tests of `remora check --linearizability`'s argument handling.
use super::*;
use remora::core::canrt::WriteAck;

#[test]
fn posted_canrt_writes_are_refused() {
    let ok = index_cfg(IndexKind::Canrt, 16).unwrap();
    assert!(refuse_weak(&ok).is_ok());
    let weak = IndexCfg::Canrt {
        cfg: CanrtConfig {
            ack: WriteAck::Posted,
            ..CanrtConfig::new(0)
        },
        growth: Default::default(),
    };
    assert!(refuse_weak(&weak).unwrap_err().contains("not linearizable"));
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    lin: LinArgs,
}

fn args(extra: &[&str]) -> LinArgs {
    use clap::Parser;
    let base = ["check", "--linearizability", "--index", "chime"];
    Cli::parse_from(base.iter().chain(extra)).lin
}

/// Fill-and-drain histories run CHIME's merges and reuse under the checker; the mix
/// alone (15% deletes) leaves leaves too full to merge, so the count is what shows the
/// history exercised them.
#[test]
fn waves_run_chime_merges_and_reuse_under_the_checker() {
    let waves = args(&[
        "--ops",
        "60000",
        "--with",
        "merge",
        "--cold-keys",
        "64",
        "--hot-percent",
        "20",
        "--waves",
        "400",
        "--lease-us",
        "1000",
    ]);
    let cfg = configured(&waves).unwrap();
    let (h, m) = sim_history(&waves, &cfg, 3).unwrap();
    let r = check(&h, &CheckConfig::new(3));
    assert!(r.is_ok(), "{r}");
    assert!(m.merges >= 3 && m.reused >= 1, "{m:?}");
    let plain = args(&["--ops", "60000", "--with", "merge"]);
    let (_, m) = sim_history(&plain, &configured(&plain).unwrap(), 3).unwrap();
    assert!(m.merges < 3, "{m:?}");
}

#[test]
fn leases_apply_to_lock_based_indexes_only() {
    assert!(configured(&args(&["--lease-us", "0"])).is_err());
    let mut a = args(&["--lease-us", "300"]);
    match configured(&a).unwrap() {
        IndexCfg::Chime { cfg } => assert_eq!(cfg.sherman.lease.lease_ns, 300_000),
        _ => panic!("not chime"),
    }
    a.index = IndexKind::Erda;
    assert!(configured(&a).unwrap_err().contains("--lease-us"));
}
