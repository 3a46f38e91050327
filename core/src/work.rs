//! The client CPU work index code states: what a client thread computes between its posts.
//!
//! Index code calls [`Endpoint::charge`](crate::fabric::Endpoint::charge) (or
//! [`QueuePair::charge`](crate::fabric::QueuePair::charge)) with a [`Work`] where it does
//! the work: bytes checksummed, node bytes decoded, entries scanned, cache probes, ... The
//! call is synchronous and costs nothing on fabrics that run on real CPUs (soft, verbs): the
//! work is really done there. The simulator turns it into virtual CPU time of the client
//! thread (its model's `client_*` parameters), serialised with the thread's other coroutines
//! and with its posts, so that a sim client is as CPU-bound as a real one.
//!
//! Each kind names one mechanism whose cost per unit is roughly constant on a given CPU; the
//! calibration test (`bins/src/bench/cpu_calibration.rs`) times the real code
//! paths behind each kind on the host and prints model against measured.

/// One piece of client CPU work, with its count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// CRC-32C (Castagnoli) over this many bytes: Erda's object checksums (hardware
    /// instruction above `erda::HW_CRC_MIN_BYTES`, slice-by-16 tables below), CANRT's item
    /// checksums.
    Crc32c(usize),
    /// CRC-64 (slice-by-16 tables) over this many bytes: the line both CRC-64s below take on
    /// a CPU without the carry-less multiply (no index charges it on the papers' CPUs).
    Crc64(usize),
    /// CRC-64 by carry-less multiply (PCLMULQDQ folding, `remora_layouts::crc64fold`) over
    /// this many bytes: Catfish's node checks (CRC-64/ECMA-182, `crc64ecma`) and the
    /// checksum SMART computes into a leaf it builds (CRC-64/XZ, `crc64xz`), the same code
    /// with other constants. SMART's check of a leaf it reads is [`Work::LeafCheck`]. The
    /// papers' CPUs (Xeons) have the instruction; on a CPU without it the same checksums
    /// take the table line of [`Work::Crc64`].
    Crc64Clmul(usize),
    /// Bytes of a page image or message checked and decoded into the client's view of it:
    /// Sherman's `PageHeader::decode` (header words, then a hash of the header or of the
    /// whole internal page), WORT replies, Catfish search hits, CHIME groups. A fixed part
    /// per decode and a cost per byte, calibrated on Sherman's two page decodes.
    Decode(usize),
    /// CHIME's `decode_group` over this many groups: each group's 20 words hashed in one
    /// serial chain and checked, its 8 entries decoded. A cost per group.
    GroupDecode(usize),
    /// A SMART leaf image of this many bytes checked as `check_leaf` does: the header words
    /// decoded, then a CRC-64/XZ by carry-less multiply over the valid bit, meta word, key
    /// and value area. A fixed part per leaf (the decode, a short CRC's folds) and a cost
    /// per byte: a small leaf costs far more than [`Work::Crc64Clmul`]'s line gives it.
    LeafCheck(usize),
    /// SMART's `NodeImg::decode` of an inner node with this many slots (4, 16, 48 or 256):
    /// the header checked, a 256-slot image initialised and moved whatever the node's type
    /// (the fixed part), then each slot word read (the per-slot part). Its own kind: a
    /// small node costs far more than its bytes at [`Work::Decode`]'s rate.
    NodeDecode(usize),
    /// Entries examined by a linear scan: slots of a Sherman leaf, items of a CANRT data
    /// node, children of a SMART Node4-256 or WOART node, entries of an Erda neighbourhood.
    Scan(usize),
    /// Probes of a client-side cache or hash table (SMART's node cache, Sherman's index
    /// cache, CANRT's prefix cache, Erda's hopscotch neighbourhood lookup).
    Probe(usize),
    /// Steps of one binary search (Sherman's `route_for` over an internal page's entries:
    /// `search_steps(count)`), a fixed part per search (slicing the entries, building the
    /// route) and a cost per step.
    Compare(usize),
    /// A sort of this many items (range results, Catfish's collected entries): a fixed part
    /// per sort and a cost per `n log2 n`.
    Sort(usize),
    /// Entries of one R-tree node tested against a search window (intersection or
    /// containment), the hits collected: a fixed part per node and a cost per entry.
    Rect(usize),
    /// Keys drawn and formatted by a benchmark driver (YCSB key chooser and key bytes).
    KeyGen(usize),
}

/// The number of kinds of [`Work`].
pub const KINDS: usize = 13;

impl Work {
    /// Every kind, with a count of 1 (for tables and calibration).
    pub const ALL: [Work; KINDS] = [
        Work::Crc32c(1),
        Work::Crc64(1),
        Work::Decode(1),
        Work::Scan(1),
        Work::Probe(1),
        Work::Compare(1),
        Work::Sort(1),
        Work::Rect(1),
        Work::KeyGen(1),
        Work::Crc64Clmul(1),
        Work::NodeDecode(1),
        Work::GroupDecode(1),
        Work::LeafCheck(1),
    ];

    /// This kind's index in [`Work::ALL`].
    pub const fn kind(self) -> usize {
        match self {
            Work::Crc32c(_) => 0,
            Work::Crc64(_) => 1,
            Work::Decode(_) => 2,
            Work::Scan(_) => 3,
            Work::Probe(_) => 4,
            Work::Compare(_) => 5,
            Work::Sort(_) => 6,
            Work::Rect(_) => 7,
            Work::KeyGen(_) => 8,
            Work::Crc64Clmul(_) => 9,
            Work::NodeDecode(_) => 10,
            Work::GroupDecode(_) => 11,
            Work::LeafCheck(_) => 12,
        }
    }

    /// The count: bytes, slots, groups, entries, probes, steps, items, tests or keys.
    pub const fn count(self) -> usize {
        match self {
            Work::Crc32c(n)
            | Work::Crc64(n)
            | Work::Decode(n)
            | Work::Scan(n)
            | Work::Probe(n)
            | Work::Compare(n)
            | Work::Sort(n)
            | Work::Rect(n)
            | Work::KeyGen(n)
            | Work::Crc64Clmul(n)
            | Work::NodeDecode(n)
            | Work::GroupDecode(n)
            | Work::LeafCheck(n) => n,
        }
    }

    /// The units a cost is stated per: `count` for every kind but [`Work::Sort`], whose
    /// work grows as `n log2 n` (comparisons of a comparison sort; at least `n`).
    pub fn units(self) -> u64 {
        let n = self.count() as u64;
        match self {
            Work::Sort(_) => n * (u64::BITS - n.leading_zeros()).max(1) as u64,
            _ => n,
        }
    }

    /// The kind's name, as the sim's model parameters and tables spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Work::Crc32c(_) => "crc32c",
            Work::Crc64(_) => "crc64",
            Work::Decode(_) => "decode",
            Work::Scan(_) => "scan",
            Work::Probe(_) => "probe",
            Work::Compare(_) => "compare",
            Work::Sort(_) => "sort",
            Work::Rect(_) => "rect",
            Work::KeyGen(_) => "keygen",
            Work::Crc64Clmul(_) => "crc64clmul",
            Work::NodeDecode(_) => "nodedecode",
            Work::GroupDecode(_) => "groupdecode",
            Work::LeafCheck(_) => "leafcheck",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_distinct_and_indexed() {
        for (i, w) in Work::ALL.iter().enumerate() {
            assert_eq!(w.kind(), i);
            assert_eq!(w.count(), 1);
        }
        assert_eq!(Work::Sort(8).units(), 8 * 4);
        assert_eq!(Work::Sort(1).units(), 1);
        assert_eq!(Work::Sort(0).units(), 0);
        assert_eq!(Work::Scan(7).units(), 7);
    }
}
