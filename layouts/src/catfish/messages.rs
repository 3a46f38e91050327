//! The fast-messaging formats: requests, statuses, response headers and hits.
use super::*;

/// Request opcodes of fast messaging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    /// Format a fresh tree in the arena `[arg0 (raw GlobalAddr), + low 40 bits of arg1
    /// bytes)`, with the [`TreeKind`] in bits 40..48 of arg1 and the fanout in its top 16
    /// bits (0: [`FANOUT`]); see [`init_arg`].
    Init = 1,
    /// Give the server another arena `[arg0, + arg1)` to carve nodes from.
    Grow = 2,
    /// Insert `rect` with object id `arg0`.
    Insert = 3,
    /// Return every entry whose rectangle intersects `rect`.
    Search = 4,
    /// Send the next window of the reply to request `req_id` (the client consumed the
    /// window that ended with [`FLAG_MORE`]).
    More = 5,
    /// Give this connection its block on the memory node ([`CLIENT_BLOCK_LEN`] bytes): the
    /// request mailbox for WRITE_WITH_IMM requests at offset 0; the server sends heartbeats
    /// to the connections holding a block. The reply carries one entry whose `ptr`
    /// is the block's raw `GlobalAddr`.
    Mailbox = 6,
    /// Delete the entry with rectangle `rect` and object id `arg0` (one of them, if the same
    /// pair was inserted twice). The reply carries the deleted entry (`count` 1), or no
    /// entry if there was none.
    Delete = 7,
}

/// Bits of [`Opcode::Init`]'s arg1 holding the arena length.
pub(crate) const INIT_LEN_BITS: u32 = 40;

/// [`Opcode::Init`]'s arg1 for an arena of `len` bytes (below 2^40), a tree `kind` and
/// `fanout` entries per node.
pub const fn init_arg(len: u64, kind: TreeKind, fanout: usize) -> u64 {
    (len & ((1 << INIT_LEN_BITS) - 1)) | (kind as u64) << INIT_LEN_BITS | (fanout as u64) << 48
}

/// Splits [`Opcode::Init`]'s arg1 into arena length, tree kind and fanout (0: default).
pub const fn split_init_arg(arg1: u64) -> Result<(u64, TreeKind, usize), LayoutError> {
    let kind = match TreeKind::decode((arg1 >> INIT_LEN_BITS) & 0xff) {
        Ok(k) => k,
        Err(e) => return Err(e),
    };
    Ok((
        arg1 & ((1 << INIT_LEN_BITS) - 1),
        kind,
        (arg1 >> 48) as usize,
    ))
}

/// Bytes of a connection's block (see [`Opcode::Mailbox`]).
pub const CLIENT_BLOCK_LEN: usize = 64;
/// Reserved in the connection's block (it held a heartbeat slot; the server now sends each
/// client its heartbeat as a message, as the paper's server does).
pub const CLIENT_HEARTBEAT_OFFSET: u64 = 56;
const _: () = assert!(REQUEST_LEN as u64 <= CLIENT_HEARTBEAT_OFFSET);
const _: () = assert!(CLIENT_HEARTBEAT_OFFSET + 8 <= CLIENT_BLOCK_LEN as u64);

/// Magic in bits 15..0 of a request's first word.
pub const REQUEST_MAGIC: u16 = 0xCF01;
/// Magic in bits 15..0 of a response message's first word.
pub const RESPONSE_MAGIC: u16 = 0xCF02;
/// Bytes of an encoded [`Request`].
pub const REQUEST_LEN: usize = 40;

/// A fast-messaging request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// What the request asks (bits 23..16 of the first word).
    pub op: Opcode,
    /// Reply messages the client has received on this connection so far, modulo 256 (the
    /// server's flow control: it keeps at most a window of unread replies per connection).
    pub acked: u8,
    /// Client-chosen id echoed in the response (bits 63..32 of the first word).
    pub req_id: u32,
    /// Rectangle argument (bytes 8..24).
    pub rect: Rect,
    /// First argument word (bytes 24..32); meaning per [`Opcode`].
    pub arg0: u64,
    /// Second argument word (bytes 32..40); meaning per [`Opcode`].
    pub arg1: u64,
}

impl Request {
    /// The request's 40 bytes: magic, opcode, acked, req_id word; rectangle; arg0; arg1.
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut out = [0u8; REQUEST_LEN];
        let w0 = REQUEST_MAGIC as u64
            | (self.op as u64) << 16
            | (self.acked as u64) << 24
            | (self.req_id as u64) << 32;
        out[0..8].copy_from_slice(&w0.to_le_bytes());
        let mut r = [0u8; RECT_LEN];
        self.rect.encode_into(&mut r);
        out[8..24].copy_from_slice(&r);
        out[24..32].copy_from_slice(&self.arg0.to_le_bytes());
        out[32..40].copy_from_slice(&self.arg1.to_le_bytes());
        out
    }

    /// Decodes 40 bytes, checking the magic and the opcode.
    pub fn decode(bytes: &[u8]) -> Result<Request, LayoutError> {
        if bytes.len() != REQUEST_LEN {
            return Err(LayoutError::Short {
                need: REQUEST_LEN,
                got: bytes.len(),
            });
        }
        let w0 = read_u64(bytes, 0)?;
        if w0 as u16 != REQUEST_MAGIC {
            return Err(LayoutError::BadMagic {
                expected: REQUEST_MAGIC as u64,
                found: w0 & 0xffff,
            });
        }
        let op = match (w0 >> 16) as u8 {
            1 => Opcode::Init,
            2 => Opcode::Grow,
            3 => Opcode::Insert,
            4 => Opcode::Search,
            5 => Opcode::More,
            6 => Opcode::Mailbox,
            7 => Opcode::Delete,
            other => {
                return Err(LayoutError::OutOfRange {
                    field: "opcode",
                    value: other as u64,
                });
            }
        };
        Ok(Request {
            op,
            acked: (w0 >> 24) as u8,
            req_id: (w0 >> 32) as u32,
            rect: Rect::decode(bytes, 8)?,
            arg0: read_u64(bytes, 24)?,
            arg1: read_u64(bytes, 32)?,
        })
    }
}

/// Outcome of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// The request succeeded.
    Ok = 0,
    /// The server's arenas are exhausted: send [`Opcode::Grow`] and retry.
    Full = 1,
    /// The request was malformed (bad rectangle, bad arena).
    BadRequest = 2,
    /// No tree was formatted yet.
    NotInitialized = 3,
    /// The server found its own tree corrupt.
    Corrupt = 4,
}

/// The response's last message carries this flag; a search's hits may span several.
pub const FLAG_LAST: u8 = 1;
/// The last message of a window: more of this reply is waiting at the server, which sends it
/// when the client asks with [`Opcode::More`].
pub const FLAG_MORE: u8 = 2;
/// Byte of a response message holding its flags (bits 24..32 of the first word).
pub const RESPONSE_FLAGS_BYTE: usize = 3;
/// Bytes of a [`ResponseHeader`].
pub(crate) const RESPONSE_HEADER_LEN: usize = 16;

/// Header of one response message, followed by `count` entries of [`ENTRY_LEN`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHeader {
    /// Outcome of the request (bits 23..16 of the first word).
    pub status: Status,
    /// [`FLAG_LAST`] and [`FLAG_MORE`] bits.
    pub flags: u8,
    /// Id of the request this answers.
    pub req_id: u32,
    /// The server's current load, piggybacked on every reply.
    pub load_permille: u16,
    /// Entries following the header in this message.
    pub count: u32,
}

/// Hits that fit in one message of `max_message` bytes.
pub const fn hits_per_message(max_message: usize) -> usize {
    max_message.saturating_sub(RESPONSE_HEADER_LEN) / ENTRY_LEN
}

impl ResponseHeader {
    /// The header's 16 bytes: magic, status, flags, req_id; then load (bits 15..0) and count (bits
    /// 63..32).
    pub fn encode(&self) -> [u8; RESPONSE_HEADER_LEN] {
        let mut out = [0u8; RESPONSE_HEADER_LEN];
        let w0 = RESPONSE_MAGIC as u64
            | (self.status as u64) << 16
            | (self.flags as u64) << 24
            | (self.req_id as u64) << 32;
        let w1 = self.load_permille as u64 | (self.count as u64) << 32;
        out[0..8].copy_from_slice(&w0.to_le_bytes());
        out[8..16].copy_from_slice(&w1.to_le_bytes());
        out
    }

    /// Decodes the header and checks that `bytes` holds exactly its `count` entries.
    pub fn decode(bytes: &[u8]) -> Result<ResponseHeader, LayoutError> {
        let w0 = read_u64(bytes, 0)?;
        let w1 = read_u64(bytes, 8)?;
        if w0 as u16 != RESPONSE_MAGIC {
            return Err(LayoutError::BadMagic {
                expected: RESPONSE_MAGIC as u64,
                found: w0 & 0xffff,
            });
        }
        let status = match (w0 >> 16) as u8 {
            0 => Status::Ok,
            1 => Status::Full,
            2 => Status::BadRequest,
            3 => Status::NotInitialized,
            4 => Status::Corrupt,
            other => {
                return Err(LayoutError::OutOfRange {
                    field: "status",
                    value: other as u64,
                });
            }
        };
        let count = (w1 >> 32) as u32;
        let need = RESPONSE_HEADER_LEN + count as usize * ENTRY_LEN;
        if bytes.len() != need {
            return Err(LayoutError::Short {
                need,
                got: bytes.len(),
            });
        }
        Ok(ResponseHeader {
            status,
            flags: (w0 >> 24) as u8,
            req_id: (w0 >> 32) as u32,
            load_permille: (w1 & 0xffff) as u16,
            count,
        })
    }
}

/// Encodes one hit (leaf entry) for a response message.
pub fn encode_entry(e: &Entry, out: &mut [u8; ENTRY_LEN]) {
    let mut r = [0u8; RECT_LEN];
    e.rect.encode_into(&mut r);
    out[..RECT_LEN].copy_from_slice(&r);
    out[RECT_LEN..].copy_from_slice(&e.ptr.to_le_bytes());
}

/// Decodes the `i`-th hit after a response header.
pub fn decode_hit(msg: &[u8], i: usize) -> Result<Entry, LayoutError> {
    let at = i
        .checked_mul(ENTRY_LEN)
        .and_then(|o| o.checked_add(RESPONSE_HEADER_LEN))
        .ok_or(LayoutError::OutOfRange {
            field: "hit index",
            value: i as u64,
        })?;
    Ok(Entry {
        rect: Rect::decode(msg, at)?,
        ptr: read_u64(msg, at + RECT_LEN)?,
    })
}
