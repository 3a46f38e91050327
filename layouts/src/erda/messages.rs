//! The client/server messages: requests, replies, statuses and the hello.
use super::*;

/// What a client asks the server for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReqOp {
    /// Insert or overwrite: always granted (unless full).
    Upsert = 1,
    /// Overwrite: granted only if the key is present.
    Update = 2,
    /// Append a deleted object: granted only if the key is present. The server writes the
    /// deleted object itself before it grants (the client writes nothing).
    Delete = 3,
    /// A read through the server (the SEND path, used while the key's head is being
    /// cleaned): answered [`Status::Located`] with the newest whole object, or `Absent`.
    Get = 4,
}

impl ReqOp {
    /// The op for its byte (1..=4), or an error.
    pub const fn from_u8(b: u8) -> Result<ReqOp, LayoutError> {
        match b {
            1 => Ok(ReqOp::Upsert),
            2 => Ok(ReqOp::Update),
            3 => Ok(ReqOp::Delete),
            4 => Ok(ReqOp::Get),
            _ => Err(LayoutError::OutOfRange {
                field: "request_op",
                value: b as u64,
            }),
        }
    }
}

/// Request word bits 7..0: the [`ReqOp`].
pub(crate) const REQ_OP: Field = Field::new("op", 0, 8);
/// Request word bits 15..8: key length in bytes.
pub(crate) const REQ_KEY_LEN: Field = Field::new("key_len", 8, 8);
/// Request word bits 31..16: value length in bytes.
pub(crate) const REQ_VALUE_LEN: Field = Field::new("value_len", 16, 16);
/// Request word bits 63..32: the client's request sequence number.
pub const REQ_SEQ: Field = Field::new("seq", 32, 32);
const _: () = assert_disjoint(&[REQ_OP, REQ_KEY_LEN, REQ_VALUE_LEN, REQ_SEQ]);

/// A write request, written into the client's mailbox by WRITE_WITH_IMM (immediate = the
/// client id): `[word: op, key length, value length, sequence][key, 16 bytes]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// What the client asks.
    pub op: ReqOp,
    /// Client sequence number, echoed in the reply.
    pub seq: u32,
    /// Length of the value the client will write, in bytes.
    pub value_len: u16,
    /// Key length in bytes (1..=[`KEY_MAX`]).
    pub key_len: u8,
    /// The key, zero-padded.
    pub key: [u8; KEY_MAX],
    /// Offset (units) of an earlier grant of this key that the requester found in flight
    /// past its lease and has fenced the writer of (0: none): the server settles that grant
    /// (keeps its object if whole, else reverts it) before handling this request.
    pub revoke: u32,
}

/// Bytes of an encoded [`Request`] (fits a mailbox).
pub const REQUEST_LEN: usize = 32;
const _: () = assert!(REQUEST_LEN <= MAILBOX_LEN);

impl Request {
    /// A request for `key` (1..=[`KEY_MAX`] bytes) with a value of `value_len` bytes; no revoke.
    pub fn new(op: ReqOp, seq: u32, key: &[u8], value_len: usize) -> Result<Request, LayoutError> {
        check_key(key)?;
        if value_len > VALUE_MAX {
            return Err(LayoutError::OutOfRange {
                field: "value_len",
                value: value_len as u64,
            });
        }
        let mut k = [0u8; KEY_MAX];
        k[..key.len()].copy_from_slice(key);
        Ok(Request {
            op,
            seq,
            value_len: value_len as u16,
            key_len: key.len() as u8,
            key: k,
            revoke: 0,
        })
    }
    /// The same request, naming a fenced writer's grant at `units` to settle first.
    pub fn with_revoke(mut self, units: u32) -> Request {
        self.revoke = units & MAX_UNITS as u32;
        self
    }
    /// The key (its recorded length).
    pub fn key(&self) -> &[u8] {
        &self.key[..(self.key_len as usize).min(KEY_MAX)]
    }
    /// The request's 32 bytes: packed word, key, revoke (as a u64), little-endian.
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let w = REQ_OP.set(0, self.op as u64);
        let w = REQ_KEY_LEN.set(w, self.key_len as u64);
        let w = REQ_VALUE_LEN.set(w, self.value_len as u64);
        let w = REQ_SEQ.set(w, self.seq as u64);
        let mut out = [0u8; REQUEST_LEN];
        out[..8].copy_from_slice(&w.to_le_bytes());
        out[8..24].copy_from_slice(&self.key);
        out[24..32].copy_from_slice(&(self.revoke as u64).to_le_bytes());
        out
    }
    /// Decodes 32 bytes, checking the op, key length and padding, value length and revoke.
    pub fn decode(bytes: &[u8]) -> Result<Request, LayoutError> {
        let w = read_u64(bytes, 0)?;
        if bytes.len() < REQUEST_LEN {
            return Err(LayoutError::Short {
                need: REQUEST_LEN,
                got: bytes.len(),
            });
        }
        let op = ReqOp::from_u8(REQ_OP.get(w) as u8)?;
        let key_len = REQ_KEY_LEN.get(w) as usize;
        let value_len = REQ_VALUE_LEN.get(w) as usize;
        let mut key = [0u8; KEY_MAX];
        key.copy_from_slice(&bytes[8..24]);
        let revoke = read_u64(bytes, 24)?;
        if revoke > MAX_UNITS {
            return Err(LayoutError::OutOfRange {
                field: "revoke",
                value: revoke,
            });
        }
        if key_len == 0 || key_len > KEY_MAX || key[key_len..].iter().any(|&b| b != 0) {
            return Err(LayoutError::OutOfRange {
                field: "key_len",
                value: key_len as u64,
            });
        }
        if value_len > VALUE_MAX || (matches!(op, ReqOp::Delete | ReqOp::Get) && value_len != 0) {
            return Err(LayoutError::OutOfRange {
                field: "value_len",
                value: value_len as u64,
            });
        }
        Ok(Request {
            op,
            seq: REQ_SEQ.get(w) as u32,
            value_len: value_len as u16,
            key_len: key_len as u8,
            key,
            revoke: revoke as u32,
        })
    }
}

/// The server's answer to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Space granted at (head, units): the client writes its object there (for a delete,
    /// the server already wrote the deleted object there).
    Granted = 1,
    /// Update/delete of an absent key: nothing to write.
    Absent = 2,
    /// No free bucket in the key's neighborhood.
    TableFull = 3,
    /// The key's head log has no space left.
    LogFull = 4,
    /// The request did not decode, or came on another client's mailbox.
    BadRequest = 5,
    /// Hello answered: `units` carries the superblock offset, `head` unused.
    Welcome = 6,
    /// No mailbox left for a new client.
    TooManyClients = 7,
    /// Another write of this key is granted and not yet durable: `head` and the low 32 bits
    /// of `arg` name that grant (head, units), the high 32 bits its writer's fabric client
    /// id. Ask again after a back-off; past a lease, fence the writer and name the grant in
    /// [`Request::revoke`].
    Busy = 8,
    /// A hello on a connection that already has an open session (another handle on the
    /// same endpoint): handles share one connection's receive queue, so a second one would
    /// take the first one's replies. Share the open handle among coroutines, or close it.
    SessionOpen = 9,
    /// A goodbye answered: the session's mailboxes are free.
    Closed = 10,
    /// A [`ReqOp::Get`] answered: the key's newest whole object is at (`head`, low 32 bits
    /// of `arg`); the high 32 bits carry the head's state word epoch it was resolved under.
    Located = 11,
}

impl Status {
    /// The status for its byte (1..=11), or an error.
    pub const fn from_u8(b: u8) -> Result<Status, LayoutError> {
        Ok(match b {
            1 => Status::Granted,
            2 => Status::Absent,
            3 => Status::TableFull,
            4 => Status::LogFull,
            5 => Status::BadRequest,
            6 => Status::Welcome,
            7 => Status::TooManyClients,
            8 => Status::Busy,
            9 => Status::SessionOpen,
            10 => Status::Closed,
            11 => Status::Located,
            _ => {
                return Err(LayoutError::OutOfRange {
                    field: "status",
                    value: b as u64,
                });
            }
        })
    }
}

/// Reply word bits 7..0: the [`Status`].
pub(crate) const REP_STATUS: Field = Field::new("status", 0, 8);
/// Reply word bits 15..8: head id.
pub(crate) const REP_HEAD: Field = Field::new("head", 8, 8);
/// Reply word bits 31..16: status-specific extra (see [`Reply`]).
pub(crate) const REP_AUX: Field = Field::new("aux", 16, 16);
/// Reply word bits 63..32: the request's sequence number (hello: the client id).
pub(crate) const REP_SEQ: Field = Field::new("seq", 32, 32);
const _: () = assert_disjoint(&[REP_STATUS, REP_HEAD, REP_AUX, REP_SEQ]);

/// The server's SEND back: `[word: status, head, aux, sequence][u64: units or superblock
/// offset]`. For a hello, `seq` carries the client id granted. For `Busy`, `aux` is the
/// length of the grant in flight's object in 8-byte units (its durable mark follows it), so
/// the waiter can watch for the mark with one-sided READs instead of asking the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// The answer.
    pub status: Status,
    /// Head of the grant or located object.
    pub head: u8,
    /// Sequence number of the request answered (hello: the client id granted).
    pub seq: u32,
    /// Offset in 8-byte units, or the superblock offset; meaning per [`Status`].
    pub arg: u64,
    /// Status-specific extra: for `Busy`, the in-flight object's length in 8-byte units.
    pub aux: u16,
}

/// Bytes of an encoded [`Reply`].
pub const REPLY_LEN: usize = 16;

impl Reply {
    /// The reply's 16 bytes: packed word, then `arg`, little-endian.
    pub fn encode(&self) -> [u8; REPLY_LEN] {
        let w = REP_STATUS.set(0, self.status as u64);
        let w = REP_HEAD.set(w, self.head as u64);
        let w = REP_AUX.set(w, self.aux as u64);
        let w = REP_SEQ.set(w, self.seq as u64);
        let mut out = [0u8; REPLY_LEN];
        out[..8].copy_from_slice(&w.to_le_bytes());
        out[8..].copy_from_slice(&self.arg.to_le_bytes());
        out
    }
    /// Decodes 16 bytes, checking the status byte.
    pub fn decode(bytes: &[u8]) -> Result<Reply, LayoutError> {
        if bytes.len() != REPLY_LEN {
            return Err(LayoutError::Short {
                need: REPLY_LEN,
                got: bytes.len(),
            });
        }
        let w = read_u64(bytes, 0)?;
        if w & !(REP_STATUS.mask() | REP_HEAD.mask() | REP_AUX.mask() | REP_SEQ.mask()) != 0 {
            return Err(LayoutError::OutOfRange {
                field: "reply",
                value: w,
            });
        }
        Ok(Reply {
            status: Status::from_u8(REP_STATUS.get(w) as u8)?,
            head: REP_HEAD.get(w) as u8,
            seq: REP_SEQ.get(w) as u32,
            arg: read_u64(bytes, 8)?,
            aux: REP_AUX.get(w) as u16,
        })
    }
}

/// The SEND a client opens a session with.
pub const HELLO: [u8; 8] = *b"ERDAHELO";

/// Bytes of a hello that names the client's fabric client id (little-endian u32 after
/// [`HELLO`]), which the server quotes to writers waiting on this client's grants.
pub(crate) const HELLO_LEN: usize = 12;

/// The hello of the client whose fabric client id is `id`.
pub fn hello(id: u32) -> [u8; HELLO_LEN] {
    let mut m = [0u8; HELLO_LEN];
    m[..8].copy_from_slice(&HELLO);
    m[8..].copy_from_slice(&id.to_le_bytes());
    m
}

/// The fabric client id a hello names (0, "unknown", for a bare [`HELLO`]); `None` if `msg`
/// is not a hello.
pub(crate) fn decode_hello(msg: &[u8]) -> Option<u32> {
    match msg.len() {
        8 if msg == HELLO => Some(0),
        HELLO_LEN if msg[..8] == HELLO => msg[8..].try_into().ok().map(u32::from_le_bytes),
        _ => None,
    }
}

/// Bytes of a hello that also asks for `slots` request mailboxes (little-endian u32 after
/// the fabric client id): one per request a handle keeps in flight at once.
pub(crate) const HELLO_SLOTS_LEN: usize = 16;

/// The hello of fabric client `id` asking for `slots` request mailboxes.
pub fn hello_slots(id: u32, slots: u32) -> [u8; HELLO_SLOTS_LEN] {
    let mut m = [0u8; HELLO_SLOTS_LEN];
    m[..HELLO_LEN].copy_from_slice(&hello(id));
    m[HELLO_LEN..].copy_from_slice(&slots.to_le_bytes());
    m
}

/// The fabric client id and mailbox count a hello asks for (a hello without a count asks
/// for one); `None` if `msg` is not a hello.
pub fn decode_hello_slots(msg: &[u8]) -> Option<(u32, u32)> {
    if msg.len() == HELLO_SLOTS_LEN && msg[..8] == HELLO {
        let id = u32::from_le_bytes(msg[8..12].try_into().ok()?);
        let slots = u32::from_le_bytes(msg[12..16].try_into().ok()?);
        return Some((id, slots.max(1)));
    }
    decode_hello(msg).map(|id| (id, 1))
}

/// The SEND that ends a session (its mailboxes are freed; answered [`Status::Closed`]).
pub const GOODBYE: [u8; 8] = *b"ERDABYE!";
