//! Erda's Table 1 (seeds/004, section 5.6): NVM bytes written per create, update and delete,
//! for Erda, Redo Logging and Read-After-Write, in the paper's object format and in remora's.
//!
//! **What is counted** (the sim's NVM accounting, `remora_poller::sim::NvmStats`): bytes the
//! NIC placed in the memory node's region by WRITE and atomics, plus bytes the node's CPU
//! stored, while the operation ran and (baselines) while its record was applied. Request
//! messages are not counted, as in the paper: a SEND's payload is not a region write, and
//! Erda's requests (WRITE_WITH_IMM into a mailbox) are left out (`nic_write_imm`). Cache-line
//! write-backs are reported beside it, not in it.
//!
//! **Why remora's figures differ from the paper's** (remora keeps its format: other code, the
//! log cleaner included, depends on it):
//! - Erda's object header is 16 bytes (magic, delete bit, key and value lengths, a CRC-32C and
//!   padding), objects are padded to 8 bytes, against the paper's 5 bytes (1-bit tag and 4-byte
//!   CRC); each client-written object is followed by an 8-byte *durable mark* (issue 11:
//!   acknowledged means durable, the server forgets finished grants by it).
//! - A bucket fill writes the control word (used bit, head id, key length: 8 bytes, the paper's
//!   1-byte head id) and the whole 16-byte key field; the metadata word is stored whole
//!   (8 bytes, where the paper counts the tag and one 4-byte offset).
//! - Erda's bucket fill runs inside a stripe-version section: two 8-byte stores (the words a
//!   one-sided reader validates a neighborhood against, needed because a READ's words may be
//!   observed in any order; they are never persisted).
//! - The baselines' log record has an 8-byte header (kind, lengths, CRC-32C; the paper's
//!   4-byte CRC), and the data slot an 8-byte header (lengths and capacity).

/// The three schemes of Table 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// Erda: out-of-place writes with an 8-byte atomic metadata switch.
    Erda,
    /// Redo Logging: the record is SENT to the server, which logs it, answers, then applies it.
    Redo,
    /// Read-After-Write: the client WRITEs the record into a reserved ring slot and READs it
    /// back; the server applies it later.
    Raw,
}

/// The three write operations of Table 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOp {
    /// An upsert of an absent key.
    Create,
    /// An update of a present key with a value of the same size.
    Update,
    /// A delete of a present key.
    Delete,
}

impl WriteOp {
    /// The three operations, in Table 1's column order.
    pub const ALL: [WriteOp; 3] = [WriteOp::Create, WriteOp::Update, WriteOp::Delete];
    /// The operation's name in reports.
    pub const fn name(self) -> &'static str {
        match self {
            WriteOp::Create => "create",
            WriteOp::Update => "update",
            WriteOp::Delete => "delete",
        }
    }
}

impl System {
    /// The three schemes, in Table 1's row order.
    pub const ALL: [System; 3] = [System::Erda, System::Redo, System::Raw];
    /// The scheme's name in reports (`erda`, `erda-redo`, `erda-raw`).
    pub const fn name(self) -> &'static str {
        match self {
            System::Erda => "erda",
            System::Redo => "erda-redo",
            System::Raw => "erda-raw",
        }
    }
}

/// The paper's formula (N = key + value bytes).
pub const fn paper_bytes(sys: System, op: WriteOp, key: usize, value: usize) -> usize {
    let n = key + value;
    match (sys, op) {
        (System::Erda, WriteOp::Create) => key + 10 + n,
        (System::Erda, WriteOp::Update) => 9 + n,
        (System::Erda, WriteOp::Delete) => key + 9,
        (_, WriteOp::Create) => key + 12 + 2 * n,
        (_, WriteOp::Update) => 4 + 2 * n,
        (_, WriteOp::Delete) => key + 8,
    }
}

/// The same accounting for remora's format (see the module docs for each term): what the
/// sim measures, exactly (tested by `remora bench --table1`'s unit test).
pub const fn remora_bytes(sys: System, op: WriteOp, key: usize, value: usize) -> usize {
    use remora_layouts::erda::{DURABLE_MARK_LEN, KEY_MAX, object_len};
    const META: usize = 8;
    const BUCKET_FILL: usize = 8 + KEY_MAX;
    const STRIPE_SECTION: usize = 2 * 8;
    let rec = super::record_len(key, value);
    let slot = super::server::SLOT_HEADER + key + value;
    match (sys, op) {
        (System::Erda, WriteOp::Create) => {
            STRIPE_SECTION + BUCKET_FILL + META + object_len(key, value) + DURABLE_MARK_LEN
        }
        (System::Erda, WriteOp::Update) => META + object_len(key, value) + DURABLE_MARK_LEN,
        (System::Erda, WriteOp::Delete) => META + object_len(key, 0),
        (_, WriteOp::Create) => rec + slot + BUCKET_FILL + META,
        (_, WriteOp::Update) => rec + slot,
        // The record, then the metadata and control words cleared.
        (_, WriteOp::Delete) => super::record_len(key, 0) + 2 * 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_formulas_halve_the_baselines_writes() {
        // 8-byte key, 1 KiB value: Erda about half of Redo and RAW for create and update.
        let (k, v) = (8, 1024);
        for op in [WriteOp::Create, WriteOp::Update] {
            let e = paper_bytes(System::Erda, op, k, v) as f64;
            let r = paper_bytes(System::Redo, op, k, v) as f64;
            assert!((e / r - 0.5).abs() < 0.01, "{op:?}: {e} vs {r}");
        }
        assert_eq!(paper_bytes(System::Raw, WriteOp::Delete, 8, 0), 16);
        assert_eq!(paper_bytes(System::Erda, WriteOp::Update, 8, 16), 33);
        // remora's format keeps the ratio near a half for large values.
        let e = remora_bytes(System::Erda, WriteOp::Update, k, 4096) as f64;
        let r = remora_bytes(System::Raw, WriteOp::Update, k, 4096) as f64;
        assert!((e / r - 0.5).abs() < 0.01, "{e} vs {r}");
    }
}
