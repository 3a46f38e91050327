//! The superblock: its words, the tree's kind and the server's heartbeat.
use super::*;

/// The superblock, named by root slot [`ROOT_SLOT`]: independent 8-byte words, each
/// read and written whole, so it needs no checksum.
pub const META_MAGIC: u64 = u64::from_le_bytes(*b"CATFISH1");
/// Byte offset of [`META_MAGIC`] in the superblock.
pub const META_MAGIC_OFFSET: u64 = 0;
/// Raw `GlobalAddr` of the current root node.
pub const META_ROOT_OFFSET: u64 = 8;
/// The server's heartbeat word, see [`Heartbeat`].
pub const META_HEARTBEAT_OFFSET: u64 = 16;
/// The tree's fanout (entries per node), fixed when it is formatted.
pub const META_FANOUT_OFFSET: u64 = 24;
/// The tree's kind ([`TreeKind`]), fixed when it is formatted (0, the basic R-tree, in a
/// superblock written before the word existed: its carve was zeroed memory).
pub const META_KIND_OFFSET: u64 = 32;
/// The reclamation epoch: grows by one at a time (only the server writes it); every node
/// image carries the epoch it was born in, and a node retired in epoch `e` is reused only
/// from epoch `e + REUSE_GRACE` on (see [`REUSE_GRACE`]).
pub const META_EPOCH_OFFSET: u64 = 40;
/// Bytes of the superblock.
pub const META_LEN: usize = 48;
const _: () = assert!(META_KIND_OFFSET + 8 == META_EPOCH_OFFSET);
const _: () = assert!(META_EPOCH_OFFSET as usize + 8 == META_LEN);
const _: () = assert!(META_LEN <= 64);

/// Which R-tree variant the server keeps. Searches (messaging or offloading) read every kind
/// the same way: the node format is shared; only how the server places entries differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum TreeKind {
    /// Guttman's R-tree with the quadratic split.
    #[default]
    Guttman = 0,
    /// Beckmann et al.'s R*-tree: ChooseSubtree by overlap enlargement above the leaves,
    /// forced reinsert, the margin/overlap split (the paper's main tree).
    RStar = 1,
    /// Kamel and Faloutsos's Hilbert R-tree: entries ordered by the Hilbert value of their
    /// centres (largest Hilbert value per subtree), 2-to-3 split with a cooperating sibling.
    Hilbert = 2,
}

impl TreeKind {
    /// The kind stored in the superblock's [`META_KIND_OFFSET`] word (0..=2), or an error.
    pub const fn decode(v: u64) -> Result<TreeKind, LayoutError> {
        match v {
            0 => Ok(TreeKind::Guttman),
            1 => Ok(TreeKind::RStar),
            2 => Ok(TreeKind::Hilbert),
            other => Err(LayoutError::OutOfRange {
                field: "tree kind",
                value: other,
            }),
        }
    }

    /// Short lowercase name of the kind ("guttman", "rstar", "hilbert").
    pub const fn name(self) -> &'static str {
        match self {
            TreeKind::Guttman => "guttman",
            TreeKind::RStar => "rstar",
            TreeKind::Hilbert => "hilbert",
        }
    }
}

/// The server's CPU load report: utilisation in per-mille and a sequence number that grows
/// with every report (a client that sees the same sequence twice knows no heartbeat came).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Heartbeat {
    /// Server CPU utilisation, in per-mille (bits 15..0 of the word).
    pub load_permille: u16,
    /// Report sequence number (bits 63..16 of the word).
    pub seq: u64,
}

impl Heartbeat {
    /// The heartbeat word: load in bits 15..0, sequence above.
    pub const fn encode(&self) -> u64 {
        self.load_permille as u64 | (self.seq << 16)
    }
    /// Splits a heartbeat word into load and sequence.
    pub const fn decode(word: u64) -> Heartbeat {
        Heartbeat {
            load_permille: (word & 0xffff) as u16,
            seq: word >> 16,
        }
    }
}

/// The decoded superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Raw `GlobalAddr` of the root node ([`META_ROOT_OFFSET`]).
    pub root: u64,
    /// The server's last heartbeat ([`META_HEARTBEAT_OFFSET`]).
    pub heartbeat: Heartbeat,
    /// Entries per node ([`META_FANOUT_OFFSET`]).
    pub fanout: usize,
    /// R-tree variant ([`META_KIND_OFFSET`]).
    pub kind: TreeKind,
    /// The reclamation epoch ([`META_EPOCH_OFFSET`]).
    pub epoch: u64,
}

impl Meta {
    /// Decodes the superblock, checking the magic, fanout and tree kind.
    pub fn decode(bytes: &[u8]) -> Result<Meta, LayoutError> {
        let magic = read_u64(bytes, META_MAGIC_OFFSET as usize)?;
        if magic != META_MAGIC {
            return Err(LayoutError::BadMagic {
                expected: META_MAGIC,
                found: magic,
            });
        }
        Ok(Meta {
            root: read_u64(bytes, META_ROOT_OFFSET as usize)?,
            heartbeat: Heartbeat::decode(read_u64(bytes, META_HEARTBEAT_OFFSET as usize)?),
            fanout: check_fanout(
                usize::try_from(read_u64(bytes, META_FANOUT_OFFSET as usize)?)
                    .unwrap_or(usize::MAX),
            )?,
            kind: TreeKind::decode(read_u64(bytes, META_KIND_OFFSET as usize)?)?,
            epoch: read_u64(bytes, META_EPOCH_OFFSET as usize)?,
        })
    }
}
