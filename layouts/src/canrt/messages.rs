//! The WRITE_WITH_IMM immediate, the control messages clients SEND to the applier, and
//! the turn notice it SENDs back.
use super::*;
use crate::LayoutError;
use crate::bits::{Field, assert_disjoint, read_u32, read_u64};
use memoffset::offset_of;

// ---------------------------------------------------------------- immediate

// The slot takes exactly the bits MAX_SLOTS needs, the node the rest below the epoch.
const I_SLOT: Field = Field::new("slot", 0, 5);
const I_NODE: Field = Field::new("node", 5, 20);
const I_EPOCH: Field = Field::new("epoch", 25, 7);
const _: () = assert_disjoint(&[I_SLOT, I_NODE, I_EPOCH]);
const _: () = assert!(1 << 5 == MAX_SLOTS && 1 << 20 == MAX_DATA_NODES);

/// The WRITE_WITH_IMM immediate of an appended DataItem (paper: `node_id << 8 | bit_index`,
/// here `epoch << 25 | node_id << 5 | slot`: 5 bits hold any of [`MAX_SLOTS`], 20 bits any of
/// [`MAX_DATA_NODES`], the tree epoch mod 2^7 the top 7). The server rejects a slot past its
/// geometry's, a node past the tree's and an epoch not the tree's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imm {
    /// Tree epoch, mod 2^7 (bits 31..25).
    pub epoch: u32,
    /// Data node id, below [`MAX_DATA_NODES`] (bits 24..5).
    pub node: u32,
    /// DataItem slot, below [`MAX_SLOTS`] (bits 4..0).
    pub slot: u32,
}

impl Imm {
    /// The 32-bit immediate, or an error if the node or slot does not fit its bits.
    pub fn encode(&self) -> Result<u32, LayoutError> {
        let w = I_SLOT.set_checked(0, self.slot as u64)?;
        let w = I_NODE.set_checked(w, self.node as u64)?;
        Ok(I_EPOCH.set(w, (self.epoch & SHORT_EPOCH_MASK) as u64) as u32)
    }
    /// Decodes an immediate, refusing a slot past [`MAX_SLOTS`].
    pub fn decode(imm: u32) -> Result<Imm, LayoutError> {
        let w = imm as u64;
        let slot = I_SLOT.get(w) as u32;
        if slot as usize >= MAX_SLOTS {
            return Err(LayoutError::OutOfRange {
                field: "imm slot",
                value: slot as u64,
            });
        }
        Ok(Imm {
            epoch: I_EPOCH.get(w) as u32,
            node: I_NODE.get(w) as u32,
            slot,
        })
    }
}

// ---------------------------------------------------------------- control messages

/// What a control message asks of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ControlKind {
    /// Build the empty tree if none is published (`slots`, `value_cap` and, in `ticket`, the
    /// key width give its shape).
    Format = 1,
    /// The lock holder (`ticket`) of `node` releases without writing.
    Unlock = 2,
    /// The lock holder of `node` found it full: release, and resize the tree.
    Resize = 3,
    /// A waiter saw `ticket` served on `node` for a whole lease with no progress (its holder
    /// died or stalled before appending): apply the holder's complete item if it is in a
    /// free slot, else skip the ticket. `node` = [`SKIP_DRAIN`]: a resize has been draining
    /// for a lease; skip tickets that have not moved since the previous such request.
    Skip = 4,
    /// A writer whose `ticket` on `node` is not yet served asks to be told when it is: the
    /// server answers with a [`Turn`] once it serves the ticket (at once if it already has,
    /// or if `arg` names another data array), so the waiter costs the memory node no READs.
    /// Best effort: a waiter also looks for itself now and then.
    Wait = 5,
    /// The sending connection's writers count a write done once its append is posted (the
    /// paper's count, `WriteAck::Posted`) and hear no acknowledgement: the server stops
    /// SENDing one for each item it applies from then on (refusals still go). The ticket
    /// field carries the writer's posted window (appends it may have unconsumed); the server
    /// returns its count of consumed appends as a credit every half window, and at once when
    /// a `Quiet` arrives again (see `core::canrt::credit`). Other fields are zero.
    Quiet = 6,
}

/// [`Control::node`] of a [`ControlKind::Skip`] about the whole frozen tree.
pub const SKIP_DRAIN: u32 = u32::MAX;

/// A control message (SEND payload), 16 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Control {
    /// A [`ControlKind`] as its byte (1..=6).
    pub kind: u8,
    /// The epoch the client saw in the node's meta word (mod 2^7).
    pub epoch: u8,
    /// Format: value bytes per item.
    pub value_cap: u16,
    /// The data node the message is about ([`SKIP_DRAIN`]: the whole tree).
    pub node: u32,
    /// The lock ticket handed back (mod 2^16).
    pub ticket: u32,
    /// Format: slots per data node. Unlock and Resize: the data array generation
    /// ([`TreeHeader::array_gen`], low 32 bits) of the client's view, which names the
    /// physical node its FETCH_AND_ADD hit.
    pub arg: u32,
}

/// Bytes of an encoded [`Control`].
pub const CONTROL_LEN: usize = 16;
const _: () = assert!(core::mem::size_of::<Control>() == CONTROL_LEN);
const _: () = assert!(offset_of!(Control, node) == 4);
const _: () = assert!(offset_of!(Control, ticket) == 8);
const _: () = assert!(offset_of!(Control, arg) == 12);

impl Control {
    /// A message about `node` (epoch taken mod 2^7, ticket mod 2^16, `arg` the low 32 bits of
    /// `array_gen`).
    pub fn new(kind: ControlKind, epoch: u32, array_gen: u64, node: u32, ticket: u64) -> Control {
        Control {
            kind: kind as u8,
            epoch: (epoch & SHORT_EPOCH_MASK) as u8,
            value_cap: 0,
            node,
            ticket: (ticket & TICKET_MASK) as u32,
            arg: array_gen as u32,
        }
    }
    /// A Format message asking for a tree of shape `g` (key width carried in `ticket`).
    pub fn format(g: DataGeometry) -> Control {
        Control {
            kind: ControlKind::Format as u8,
            epoch: 0,
            value_cap: g.value_cap as u16,
            node: 0,
            ticket: g.key_len,
            arg: g.slots,
        }
    }
    /// The data-node geometry a Format message asks for.
    pub fn format_geometry(&self) -> Result<DataGeometry, LayoutError> {
        DataGeometry::new(self.arg, self.value_cap as u32)?.with_key_len(self.ticket)
    }
    /// The message's kind, or an error for an unknown kind byte.
    pub fn kind(&self) -> Result<ControlKind, LayoutError> {
        match self.kind {
            1 => Ok(ControlKind::Format),
            2 => Ok(ControlKind::Unlock),
            3 => Ok(ControlKind::Resize),
            4 => Ok(ControlKind::Skip),
            5 => Ok(ControlKind::Wait),
            6 => Ok(ControlKind::Quiet),
            k => Err(LayoutError::BadMagic {
                expected: 1,
                found: k as u64,
            }),
        }
    }
    /// The message's 16 bytes, little-endian, in field order.
    pub fn encode(&self) -> [u8; CONTROL_LEN] {
        let mut out = [0u8; CONTROL_LEN];
        out[0] = self.kind;
        out[1] = self.epoch;
        out[2..4].copy_from_slice(&self.value_cap.to_le_bytes());
        out[4..8].copy_from_slice(&self.node.to_le_bytes());
        out[8..12].copy_from_slice(&self.ticket.to_le_bytes());
        out[12..16].copy_from_slice(&self.arg.to_le_bytes());
        out
    }
    /// Decodes 16 bytes, checking the kind, the epoch (< 2^7) and the ticket (< 2^16).
    pub fn decode(bytes: &[u8]) -> Result<Control, LayoutError> {
        if bytes.len() != CONTROL_LEN {
            return Err(LayoutError::Short {
                need: CONTROL_LEN,
                got: bytes.len(),
            });
        }
        let c = Control {
            kind: bytes[0],
            epoch: bytes[1],
            value_cap: u16::from_le_bytes([bytes[2], bytes[3]]),
            node: read_u32(bytes, 4)?,
            ticket: read_u32(bytes, 8)?,
            arg: read_u32(bytes, 12)?,
        };
        c.kind()?;
        if c.epoch as u32 > SHORT_EPOCH_MASK || c.ticket as u64 > TICKET_MASK {
            return Err(LayoutError::OutOfRange {
                field: "control epoch or ticket",
                value: c.ticket as u64,
            });
        }
        Ok(c)
    }
}

// ---------------------------------------------------------------- turn notice

/// The kind byte of an encoded [`Turn`] notice.
pub(crate) const TURN_KIND: u8 = 0x54;

/// The server's answer to a [`ControlKind::Wait`] (a SEND, 16 bytes): data node `node`'s meta
/// word when it served the waiter's `ticket` (or when it found the ticket already passed, or
/// the wait about another data array: `stale`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    /// The wait named a data array that is not the tree's (`meta` is then 0).
    pub stale: bool,
    /// Not a turn but the acknowledgement of an applied append (`ticket` is the appender's).
    pub applied: bool,
    /// The waiter's lock ticket, mod 2^16.
    pub ticket: u16,
    /// The data node.
    pub node: u32,
    /// The node's meta word when the server answered.
    pub meta: Meta,
}

/// Bytes of an encoded [`Turn`].
pub const TURN_LEN: usize = 16;

impl Turn {
    /// The notice's 16 bytes: [`TURN_KIND`], flags (bit 0 stale, bit 1 applied), ticket, node, meta
    /// word.
    pub fn encode(&self) -> [u8; TURN_LEN] {
        let mut out = [0u8; TURN_LEN];
        out[0] = TURN_KIND;
        out[1] = self.stale as u8 | (self.applied as u8) << 1;
        out[2..4].copy_from_slice(&self.ticket.to_le_bytes());
        out[4..8].copy_from_slice(&self.node.to_le_bytes());
        out[8..16].copy_from_slice(&self.meta.0.to_le_bytes());
        out
    }
    /// Decodes 16 bytes, checking the kind byte and flags.
    pub fn decode(bytes: &[u8]) -> Result<Turn, LayoutError> {
        if bytes.len() != TURN_LEN {
            return Err(LayoutError::Short {
                need: TURN_LEN,
                got: bytes.len(),
            });
        }
        if bytes[0] != TURN_KIND || bytes[1] > 3 {
            return Err(LayoutError::BadMagic {
                expected: TURN_KIND as u64,
                found: bytes[0] as u64,
            });
        }
        Ok(Turn {
            stale: bytes[1] & 1 == 1,
            applied: bytes[1] & 2 == 2,
            ticket: u16::from_le_bytes([bytes[2], bytes[3]]),
            node: read_u32(bytes, 4)?,
            meta: Meta(read_u64(bytes, 8)?),
        })
    }
}
