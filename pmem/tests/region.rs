//! Persistent regions: DRAM modes, DAX refusal, bounds, emulated latency.
#![cfg(target_os = "linux")]

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use remora_pmem::{DramBacking, PersistMem, PersistentRegion, PmemError, RegionKind, flush_kind};

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect()
}

#[test]
fn dram_regions_round_trip_and_persist() {
    for backing in [DramBacking::Anonymous, DramBacking::Memfd] {
        let r = PersistentRegion::dram(10_000, backing, 0).expect("dram region");
        assert_eq!(r.kind(), RegionKind::Dram(backing));
        assert_eq!(r.len(), 10_000);
        assert_eq!(r.as_ptr() as usize & 4095, 0, "mapping is page-aligned");
        // Unaligned offsets and lengths exercise the byte head/tail and the word middle.
        for (off, len) in [
            (0usize, 1usize),
            (3, 100),
            (61, 7),
            (4096 - 5, 300),
            (9_000, 1_000),
        ] {
            let data = pattern(len, off as u8);
            r.write(off, &data).unwrap();
            r.persist(off, len).unwrap();
            let mut back = vec![0u8; len];
            r.read(off, &mut back).unwrap();
            assert_eq!(back, data, "{backing:?} off={off} len={len}");
        }
        r.flush(0, 10_000).unwrap();
        r.fence();
        r.persist(0, 0).unwrap();

        r.store_u64(8, 0x1122_3344_5566_7788).unwrap();
        assert_eq!(r.load_u64(8).unwrap(), 0x1122_3344_5566_7788);
        let mut b = [0u8; 8];
        r.read(8, &mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 0x1122_3344_5566_7788);
        assert_eq!(r.cas_u64(8, 1, 2).unwrap(), 0x1122_3344_5566_7788);
        assert_eq!(r.load_u64(8).unwrap(), 0x1122_3344_5566_7788);
        assert_eq!(
            r.cas_u64(8, 0x1122_3344_5566_7788, 2).unwrap(),
            0x1122_3344_5566_7788
        );
        assert_eq!(r.load_u64(8).unwrap(), 2);
        assert_eq!(r.fetch_add_u64(8, 5).unwrap(), 2);
        assert_eq!(r.load_u64(8).unwrap(), 7);

        let shown = r.to_string();
        assert!(shown.contains("DRAM"), "{shown}");
        assert!(shown.contains(flush_kind().name()), "{shown}");
        assert_eq!(r.fd().is_some(), backing == DramBacking::Memfd);
    }
}

#[test]
fn generic_code_runs_on_a_region() {
    fn bump<M: PersistMem>(m: &M) -> Result<u64, PmemError> {
        let v = m.load_u64(64)?;
        m.store_u64(64, v + 1)?;
        m.persist(64, 8)?;
        m.load_u64(64)
    }
    let r = PersistentRegion::dram(4096, DramBacking::Anonymous, 0).unwrap();
    assert_eq!(bump(&r).unwrap(), 1);
    assert_eq!(bump(&r).unwrap(), 2);
    assert_eq!(PersistMem::len(&r), 4096);
}

#[test]
fn memfd_can_be_mapped_again() {
    let r = PersistentRegion::dram(8192, DramBacking::Memfd, 0).unwrap();
    let fd = r.fd().expect("memfd region has a descriptor");
    // SAFETY: a fresh shared mapping of the region's memfd, unmapped below; only accessed with
    // volatile reads.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    r.write(5000, b"shared!").unwrap();
    r.persist(5000, 7).unwrap();
    let second = p.cast::<u8>();
    // SAFETY: offsets 5000..5007 are inside the 8192-byte mapping.
    let seen: Vec<u8> = (5000..5007)
        .map(|i| unsafe { second.add(i).read_volatile() })
        .collect();
    assert_eq!(seen, b"shared!");
    // SAFETY: unmapping the mapping created above, no longer used.
    unsafe { libc::munmap(p, 8192) };
}

#[test]
fn bad_offsets_are_errors_not_panics() {
    let r = PersistentRegion::dram(100, DramBacking::Anonymous, 0).unwrap();
    let mut buf = [0u8; 10];
    assert!(matches!(
        r.read(95, &mut buf),
        Err(PmemError::OutOfBounds {
            offset: 95,
            len: 10,
            size: 100
        })
    ));
    assert!(matches!(
        r.write(usize::MAX, &buf),
        Err(PmemError::OutOfBounds { .. })
    ));
    assert!(matches!(
        r.flush(50, 51),
        Err(PmemError::OutOfBounds { .. })
    ));
    assert!(matches!(
        r.persist(1, usize::MAX),
        Err(PmemError::OutOfBounds { .. })
    ));
    assert!(matches!(
        r.load_u64(4),
        Err(PmemError::Misaligned {
            offset: 4,
            align: 8
        })
    ));
    assert!(matches!(
        r.store_u64(96, 1),
        Err(PmemError::OutOfBounds { .. })
    ));
    assert!(matches!(
        r.cas_u64(3, 0, 1),
        Err(PmemError::Misaligned { .. })
    ));
    assert!(r.write(100, &[]).is_ok());
    assert!(matches!(
        PersistentRegion::dram(0, DramBacking::Memfd, 0),
        Err(PmemError::InvalidArgument(_))
    ));
}

#[test]
fn concurrent_atomics_on_a_region() {
    let r = Arc::new(PersistentRegion::dram(4096, DramBacking::Anonymous, 0).unwrap());
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let r = Arc::clone(&r);
            std::thread::spawn(move || {
                for _ in 0..10_000 {
                    r.fetch_add_u64(128, 1).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(r.load_u64(128).unwrap(), 20_000);
}

/// Whether `dir` is on a mount with the `dax` option (then MAP_SYNC would be accepted).
fn on_dax_mount(dir: &Path) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return false;
    };
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4).then(|| (PathBuf::from(f[1]), f[3].to_string()))
        })
        .filter(|(mnt, _)| dir.starts_with(mnt))
        .max_by_key(|(mnt, _)| mnt.as_os_str().len())
        .is_some_and(|(_, opts)| opts.split(',').any(|o| o == "dax" || o == "dax=always"))
}

fn scratch(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("remora-pmem-{}-{name}", std::process::id()))
}

#[test]
fn dax_refused_on_non_dax_files() {
    let mut dirs = vec![std::env::temp_dir()];
    if Path::new("/dev/shm").is_dir() {
        dirs.push(PathBuf::from("/dev/shm"));
    }
    let mut refused = 0;
    for dir in dirs {
        let path = scratch(&dir, "notdax");
        let _ = std::fs::remove_file(&path);
        let res = PersistentRegion::create_dax(&path, 1 << 16);
        // create_dax allocated the file before mapping: it must exist with the full length.
        assert_eq!(
            std::fs::metadata(&path).map(|m| m.len()).ok(),
            Some(1 << 16)
        );
        let res_open = PersistentRegion::open_dax(&path, 4096);
        let _ = std::fs::remove_file(&path);
        if on_dax_mount(&dir) {
            assert_eq!(
                res.expect("DAX mount accepts MAP_SYNC").kind(),
                RegionKind::Dax
            );
            continue;
        }
        for r in [res, res_open] {
            match r {
                Err(e @ PmemError::NotDax { .. }) => {
                    let msg = e.to_string();
                    eprintln!("{msg}");
                    assert!(msg.contains(&path.display().to_string()), "{msg}");
                    assert!(msg.contains("not on a DAX filesystem"), "{msg}");
                    refused += 1;
                }
                other => panic!("expected NotDax for {}, got {other:?}", path.display()),
            }
        }
    }
    eprintln!("MAP_SYNC refusals checked: {refused}");
}

#[test]
fn dax_open_errors_name_the_file() {
    let missing = scratch(&std::env::temp_dir(), "missing");
    let _ = std::fs::remove_file(&missing);
    let e = PersistentRegion::open_dax(&missing, 4096).unwrap_err();
    assert!(matches!(e, PmemError::Io { what: "open", .. }), "{e:?}");
    assert!(e.to_string().contains(&missing.display().to_string()));

    let small = scratch(&std::env::temp_dir(), "small");
    std::fs::write(&small, [0u8; 100]).unwrap();
    let e = PersistentRegion::open_dax(&small, 4096).unwrap_err();
    let _ = std::fs::remove_file(&small);
    assert!(
        matches!(
            e,
            PmemError::FileTooSmall {
                file_len: 100,
                wanted: 4096,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains(&small.display().to_string()));

    let zero = scratch(&std::env::temp_dir(), "zero");
    assert!(matches!(
        PersistentRegion::create_dax(&zero, 0),
        Err(PmemError::InvalidArgument(_))
    ));
}

#[test]
fn emulated_latency_adds_time_per_flushed_line() {
    const NS_PER_LINE: u64 = 2_000;
    const LINES: usize = 64;
    let r = PersistentRegion::dram(LINES * 64, DramBacking::Anonymous, NS_PER_LINE).unwrap();
    assert_eq!(r.write_latency_ns(), NS_PER_LINE);
    assert!(r.to_string().contains("2000 ns per line"), "{r}");
    eprintln!("{r}");
    r.write(0, &vec![7u8; LINES * 64]).unwrap();
    let t = Instant::now();
    r.persist(0, LINES * 64).unwrap();
    let took = t.elapsed();
    let floor = Duration::from_nanos(NS_PER_LINE * LINES as u64);
    // Lower bound only, with 1% slack for the TSC calibration.
    assert!(
        took >= floor * 99 / 100,
        "persist of {LINES} lines took {took:?} < {floor:?}"
    );
    // A 1-byte persist straddling no boundary is one line.
    let t = Instant::now();
    r.persist(10, 1).unwrap();
    assert!(t.elapsed() >= Duration::from_nanos(NS_PER_LINE) * 99 / 100);
    eprintln!(
        "emulated: {LINES} lines persisted in {took:?} (floor {floor:?}), clock {:?}",
        remora_pmem::latency::spin_clock()
    );
}
