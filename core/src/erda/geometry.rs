//! Whether an [`ErdaConfig`] forms a store, and whether it fits a region: one plan of the
//! store's layout, made by the server when it formats a region and by every builder of a
//! server before it serves ([`ErdaConfig::check`], [`super::ErdaServer::for_region`]), so a
//! geometry that cannot be served is refused at start with the reason, not at a client's
//! first message by dropping its connection.
use super::ErdaConfig;
use core::fmt;
use remora_layouts::LayoutError;
use remora_layouts::erda::{
    BUCKET_LEN, MAILBOX_LEN, MAX_HEADS, MAX_REGIONS, STRIPE_BUCKETS, SUPERBLOCK_LEN,
    SUPERBLOCK_MAGIC, SUPERBLOCK_VERSION, Superblock,
};
use remora_layouts::region::HEADER_LEN;

/// Why a geometry cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErdaConfigError {
    /// A rule of the geometry alone is broken.
    Geometry(&'static str),
    /// The superblock the geometry makes does not validate.
    Layout(LayoutError),
    /// The store takes `need` bytes (whole chunks) and a fresh region of `region_len` bytes
    /// has `free` after its header.
    DoesNotFit {
        /// Bytes the store takes.
        need: u64,
        /// Bytes free after the region header.
        free: u64,
        /// Bytes of the region.
        region_len: u64,
    },
}

impl fmt::Display for ErdaConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErdaConfigError::Geometry(why) => write!(f, "erda geometry: {why}"),
            ErdaConfigError::Layout(e) => {
                write!(f, "erda geometry does not form a valid store: {e}")
            }
            ErdaConfigError::DoesNotFit {
                need,
                free,
                region_len,
            } => write!(
                f,
                "erda store does not fit: its table and logs take {need} bytes ({} MiB) and \
                 a {region_len}-byte ({} MiB) region has {free} free; give the node a larger \
                 region or the store fewer heads, smaller logs or fewer buckets",
                need.div_ceil(1 << 20),
                region_len >> 20
            ),
        }
    }
}

impl core::error::Error for ErdaConfigError {}

/// The layout a geometry makes when its store starts at `base`.
pub(super) struct Plan {
    pub sb: Superblock,
    /// Bytes of the superblock, table, mailboxes, stripe and head state words.
    pub table_len: u64,
    /// Log regions per head.
    pub regions: u32,
    /// Bytes of the whole store.
    pub total: u64,
}

/// Plans `c`'s store at `base` (superblock not yet validated).
pub(super) fn plan(c: &ErdaConfig, base: u64) -> Result<Plan, ErdaConfigError> {
    let bad = ErdaConfigError::Geometry;
    if c.heads == 0 || c.heads as usize > MAX_HEADS || c.neighborhood == 0 {
        return Err(bad("heads 1..=8 and a neighborhood of at least 1"));
    }
    if c.segment_bytes == 0 {
        return Err(bad("segments of at least one byte"));
    }
    // Saturating: a geometry too large for the address space fails to fit or to validate.
    let buckets = c.buckets.saturating_add(c.neighborhood as u64 - 1);
    let table_len = buckets.saturating_mul(BUCKET_LEN as u64);
    let mailboxes = c.max_clients as u64 * MAILBOX_LEN as u64;
    let stripes = (buckets.div_ceil(STRIPE_BUCKETS) + 1) * 8;
    // The head state words follow the stripe words.
    let states = MAX_HEADS as u64 * 8;
    let meta_len = (SUPERBLOCK_LEN as u64)
        .saturating_add(table_len)
        .saturating_add(mailboxes + stripes + states)
        .saturating_add(63)
        / 64
        * 64;
    let regions = c.regions.clamp(1, MAX_REGIONS as u32);
    let region_bytes = c.head_bytes / regions as u64 / c.segment_bytes * c.segment_bytes;
    if region_bytes == 0 || c.regions != regions {
        return Err(bad("1..=8 regions per head, each of at least one segment"));
    }
    let mut head_base = [0u64; MAX_HEADS];
    for (i, b) in head_base.iter_mut().take(c.heads as usize).enumerate() {
        *b = base
            .saturating_add(meta_len)
            .saturating_add((i as u64).saturating_mul(c.head_bytes));
    }
    // base is chunk-aligned, so the table (right after the superblock) is line-aligned.
    let table_off = base + SUPERBLOCK_LEN as u64;
    let sb = Superblock {
        magic: SUPERBLOCK_MAGIC,
        version: SUPERBLOCK_VERSION,
        heads: c.heads,
        buckets,
        neighborhood: c.neighborhood,
        max_clients: c.max_clients,
        table_off,
        mailbox_off: table_off.saturating_add(table_len),
        segment_bytes: c.segment_bytes,
        head_bytes: c.head_bytes,
        head_base,
    };
    Ok(Plan {
        sb,
        table_len,
        regions,
        total: meta_len.saturating_add((c.heads as u64).saturating_mul(c.head_bytes)),
    })
}

impl ErdaConfig {
    /// Checks that this geometry forms a store and that the store fits a fresh region of
    /// `region_len` bytes carved in `chunk_size` chunks (the store is the first thing
    /// allocated there, as when a memory node starts with this service). Returns the bytes
    /// the store takes. A region that passes is formatted without error by the first message.
    pub fn check(&self, region_len: u64, chunk_size: u64) -> Result<u64, ErdaConfigError> {
        if !chunk_size.is_power_of_two() {
            return Err(ErdaConfigError::Geometry("a power-of-two chunk size"));
        }
        let base = (HEADER_LEN as u64).next_multiple_of(chunk_size);
        let p = plan(self, base)?;
        let need = p.total.saturating_add(chunk_size - 1) & !(chunk_size - 1);
        let free = region_len.saturating_sub(base);
        if need > free {
            return Err(ErdaConfigError::DoesNotFit {
                need,
                free,
                region_len,
            });
        }
        p.sb.validate(region_len).map_err(ErdaConfigError::Layout)?;
        Ok(need)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::erda::ErdaServer;
    use crate::fabric::FabricError;
    use crate::server::LocalRegion;
    use core::cell::RefCell;
    use remora_layouts::NodeId;
    use remora_layouts::region::RegionHeader;
    use std_alloc::vec;
    use std_alloc::vec::Vec;

    /// A fresh region of `len` bytes in `chunk` chunks (None: no chunk fits).
    struct Fresh(RefCell<Vec<u8>>);

    impl Fresh {
        fn new(len: u64, chunk: u64) -> Option<Fresh> {
            let h = RegionHeader::new(len, chunk, 0).ok()?;
            let mut m = vec![0u8; len as usize];
            m[..HEADER_LEN].copy_from_slice(&h.encode());
            Some(Fresh(RefCell::new(m)))
        }
    }

    impl LocalRegion for Fresh {
        fn node(&self) -> NodeId {
            0
        }
        fn len(&self) -> u64 {
            self.0.borrow().len() as u64
        }
        fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
            let o = offset as usize;
            buf.copy_from_slice(&self.0.borrow()[o..o + buf.len()]);
            Ok(())
        }
        fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
            let o = offset as usize;
            self.0.borrow_mut()[o..o + data.len()].copy_from_slice(data);
            Ok(())
        }
    }

    /// The memory node's geometry for a region (as `remora memnode --service erda` makes
    /// it): two heads of four log regions in half the region.
    fn memnode_like(region_len: u64) -> ErdaConfig {
        let per_region = region_len / 16;
        let eighth = (per_region / 8).max(1);
        let segment = (1u64 << (63 - eighth.leading_zeros())).clamp(64 << 10, 8 << 20);
        ErdaConfig {
            heads: 2,
            buckets: (region_len / 256)
                .next_power_of_two()
                .clamp(1 << 14, 1 << 24)
                / 2,
            segment_bytes: segment,
            head_bytes: 4 * (per_region / segment * segment),
            regions: 4,
            ..ErdaConfig::small()
        }
    }

    #[test]
    fn a_geometry_passes_the_check_exactly_when_its_region_formats() {
        let mib = 1u64 << 20;
        let mut cases = Vec::new();
        for len in [
            2 * mib,
            4 * mib,
            6 * mib,
            8 * mib,
            9 * mib,
            10 * mib,
            12 * mib,
        ] {
            for chunk in [64u64 << 10, mib, 4 * mib] {
                cases.push((ErdaConfig::small(), len, chunk));
                cases.push((memnode_like(len), len, chunk));
            }
        }
        let (mut fit, mut refused) = (0, 0);
        for (cfg, len, chunk) in cases {
            let checked = cfg.check(len, chunk);
            let Some(region) = Fresh::new(len, chunk) else {
                assert!(checked.is_err(), "no chunk in {len} bytes, yet {checked:?}");
                continue;
            };
            let formatted = ErdaServer::new(cfg).open(&region);
            assert_eq!(
                checked.is_ok(),
                formatted.is_ok(),
                "{cfg:?} in {len} bytes of {chunk}-byte chunks: check {checked:?}, format \
                 {formatted:?}"
            );
            let built = ErdaServer::for_region(cfg, len, chunk);
            assert_eq!(built.is_ok(), checked.is_ok());
            match checked {
                Ok(_) => fit += 1,
                Err(e) => {
                    refused += 1;
                    assert!(
                        matches!(e, ErdaConfigError::DoesNotFit { .. }),
                        "{cfg:?}: {e}"
                    );
                }
            }
        }
        // The memory node's old rule (8 MiB and up) let through regions that do not fit:
        // 8 MiB in 4 MiB chunks leaves the store 4 MiB.
        assert!(memnode_like(8 * mib).check(8 * mib, 4 * mib).is_err());
        assert!(memnode_like(8 * mib).check(8 * mib, 64 << 10).is_ok());
        assert!(fit > 0 && refused > 0, "{fit} fit, {refused} refused");
    }

    #[test]
    fn a_bad_geometry_is_refused_with_its_reason_not_a_panic() {
        let bad = [
            ErdaConfig {
                heads: 0,
                ..ErdaConfig::small()
            },
            ErdaConfig {
                segment_bytes: 0,
                ..ErdaConfig::small()
            },
            ErdaConfig {
                regions: 9,
                ..ErdaConfig::small()
            },
            ErdaConfig {
                segment_bytes: 3 << 16,
                ..ErdaConfig::small()
            },
            ErdaConfig {
                buckets: u64::MAX,
                ..ErdaConfig::small()
            },
            ErdaConfig {
                head_bytes: u64::MAX,
                ..ErdaConfig::small()
            },
        ];
        for cfg in bad {
            let e = cfg.check(64 << 20, 64 << 10).unwrap_err();
            assert!(!std_alloc::format!("{e}").is_empty());
            let region = Fresh::new(64 << 20, 64 << 10).unwrap();
            assert!(ErdaServer::new(cfg).open(&region).is_err(), "{cfg:?}");
        }
    }
}
