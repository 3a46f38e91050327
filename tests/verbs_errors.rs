//! Set-up errors of the verbs fabric: one clear line each, never a panic. These run on any
//! machine; on one without an RDMA device (like this project's) they check the no-device
//! message that `remora perf --fabric verbs` prints.
#![cfg(feature = "verbs")]

use remora::verbs::{ConnectOptions, Memnode, MemnodeConfig, VerbsEndpoint, VerbsError, probe};
use std::time::Duration;

fn has_device() -> bool {
    std::fs::read_dir("/sys/class/infiniband_verbs")
        .map(|d| {
            d.filter_map(Result::ok)
                .any(|e| e.file_name().to_string_lossy().starts_with("uverbs"))
        })
        .unwrap_or(false)
}

fn one_line(e: &VerbsError) -> String {
    let s = e.to_string();
    assert!(!s.contains('\n'), "error spans lines: {s}");
    assert!(!s.is_empty());
    s
}

#[test]
fn no_device_says_how_to_get_one() {
    match probe(None) {
        Err(e @ VerbsError::NoDevice) => {
            assert!(
                !has_device(),
                "NoDevice although the kernel lists a verbs device"
            );
            let s = one_line(&e);
            assert!(s.starts_with("no RDMA device found"), "{s}");
            assert!(s.contains("rdma link add rxe0 type rxe netdev"), "{s}");
            assert!(s.contains("--fabric soft"), "{s}");
        }
        Ok(dev) => {
            assert!(has_device());
            assert!(dev.port >= 1, "{dev:?}");
        }
        Err(e) => {
            // A device that cannot be used must say why in one line.
            assert!(has_device(), "{e}");
            assert!(
                matches!(
                    e,
                    VerbsError::Permission { .. } | VerbsError::PortDown { .. }
                ),
                "{e}"
            );
            one_line(&e);
        }
    }
}

#[test]
fn unknown_device_name_is_refused() {
    let e = probe(Some("no-such-rdma-device-0")).unwrap_err();
    let s = one_line(&e);
    if has_device() {
        assert!(matches!(e, VerbsError::NoSuchDevice { .. }), "{s}");
        assert!(s.contains("no-such-rdma-device-0"), "{s}");
    } else {
        assert_eq!(e, VerbsError::NoDevice);
    }
}

#[test]
fn bad_addresses_are_errors_not_panics() {
    let opts = ConnectOptions {
        device: None,
        timeout: Duration::from_secs(2),
    };
    for addr in ["", "no-port", "host:notaport", "[::1"] {
        let e = VerbsEndpoint::connect(&[addr], &opts)
            .err()
            .expect("a bad address must fail");
        assert!(
            matches!(e, VerbsError::BadAddress { .. }),
            "{addr:?} gave {e}"
        );
        assert!(one_line(&e).contains("host:port"));
    }
}

#[test]
fn connecting_without_a_memory_node_fails_cleanly() {
    let opts = ConnectOptions {
        device: None,
        timeout: Duration::from_secs(3),
    };
    let e = VerbsEndpoint::connect(&["127.0.0.1:9"], &opts)
        .err()
        .expect("nothing listens there");
    let s = one_line(&e);
    if !has_device() {
        assert!(
            matches!(e, VerbsError::NoDevice | VerbsError::Resolve { .. }),
            "without a device: {s}"
        );
    }
}

#[test]
fn memnode_without_a_device_says_so() {
    let cfg = MemnodeConfig {
        listen: "127.0.0.1:7471".into(),
        node: 0,
        region_len: 4 << 20,
        chunk_size: 64 << 10,
        dm_len: 4096,
        device: None,
        verbose: false,
        key: None,
        client_keys: Vec::new(),
        threads: 1,
    };
    match Memnode::start(cfg) {
        Err(e) => {
            let s = one_line(&e);
            if !has_device() {
                assert_eq!(e, VerbsError::NoDevice, "{s}");
            }
        }
        Ok(_) => assert!(has_device(), "a memory node started without an RDMA device"),
    }
}
