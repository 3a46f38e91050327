//! What a client and a memory node tell each other in rdma_cm private data (there is no
//! other channel). All integers little-endian. The transport may pad private data with
//! zeros, so every message starts with a magic word and decoders ignore trailing bytes.
//!
//! - `Hello` (client → node, in the connect request, 48 bytes): what the client wants
//!   (a connection, the revocation of the region's key, or the fencing of a client), its
//!   receive-buffer size, and a client id (for a connection: the id the client already has
//!   from its first memory node, 0 to be given one; for a fence: the client to fence); then
//!   its proof of the node's key (see below; zeros from a client without a key).
//! - `Welcome` (node → client, in the accept, 72 bytes): the node id, the host region's
//!   address/key/length, the device memory's address/key/length/kind, the node's
//!   receive-buffer size (the largest SEND it takes), the service, and the client's id.
//! - `Revoked` (node → client, in the reject answering a revocation, 16 bytes): the new key.
//! - `Fenced` (node → client, in the reject answering a fence, 16 bytes): the client fenced
//!   and how many of its connections were cut.
//! - `Unauthorized` (node → client, in the reject of a request without the right key, 16
//!   bytes): why.
//!
//! **Keys** (issue 26: clients who are who they say). A memory node started with a key file
//! (`remora memnode --key-file`, the soft fabric's format: `remora_poller::soft::auth`)
//! admits only requests that prove its key; a client reads the key from the file
//! `REMORA_KEY_FILE` names. The key itself never travels: the hello carries a random nonce,
//! the client's clock (Unix seconds) and a 128-bit tag over the first 32 bytes of the hello
//! (two SipHash-2-4 PRFs, each keyed by one half of the 32-byte key). The node refuses a
//! missing or wrong tag, a time more than `CLOCK_WINDOW_S` (120 s) off its own clock, and a nonce
//! it has already admitted within that window (a replayed hello). Every request needs it:
//! connections, key revocations and fences. Revoking a key means a new key file and a
//! restart of the node, as on soft.
//!
//! **Client ids** are proved too when the node's key file lists clients (`<id> <key>` lines:
//! `remora_poller::soft::auth`): a connection claiming id X must be signed with X's key,
//! and a claim of an id the node has no key for is refused (`UnknownClient`), as is a claim
//! signed with any other key (`NotThatClient`); so a client holding the node's key cannot
//! pass for another. A client whose key file holds an `<id> <key>` line claims that id at
//! every node and signs with that key. Ids the node gives new clients (claim 0, the node's
//! key) skip the listed ones. Fences and key revocations need the node's key.
//!
//! All of it is internal to the fabric except [`DmKind`], which [`super::NodeInfo`] reports.
use remora_layouts::NodeId;
use remora_poller::soft::auth::{KEY_FILE_ENV, KEY_LEN, Key, read_keys};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// First word of every message ("RMV1"), so that zero padding or a stranger's private data
/// is told apart from a message.
pub(crate) const MAGIC: u32 = u32::from_le_bytes(*b"RMV1");
/// Protocol version (bytes 4..6 of every message); a node and client of different versions
/// refuse each other.
pub(crate) const VERSION: u16 = 1;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

/// What a connect request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// A queue pair to the node (accepted with a [`Welcome`]).
    Connect,
    /// A new rkey for the node's region, cutting off every key holder (rejected with a
    /// [`Revoked`]).
    RevokeKey,
    /// Cut client `Hello::client` off the node (see `memnode.rs`).
    Fence,
}

/// Client → node, in the connect request: what the client asks for (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hello {
    /// What the client asks for.
    pub request: Request,
    /// Bytes of each of the client's receive buffers (the largest SEND the node may send it).
    pub recv_len: u32,
    /// Connect: the client's id (0: assign one). Fence: the client to fence.
    pub client: u32,
}

impl Hello {
    /// Bytes on the wire: the request (16), the nonce and time (16), the tag (16).
    pub const LEN: usize = 48;
    /// The hello, signed with the client's key ([`client_key`]) when it has one; a
    /// connection of a client whose key names its id claims that id.
    pub fn encode(&self) -> [u8; Self::LEN] {
        match client_key() {
            Ok(Some(k)) => self.signed(&k),
            _ => self.encode_unsigned(),
        }
    }
    /// The hello signed with `k` (claiming `k`'s id for a connection, if it has one).
    fn signed(&self, k: &ClientKey) -> [u8; Self::LEN] {
        let mut h = *self;
        if let (Some(id), Request::Connect) = (k.id, h.request) {
            h.client = id;
        }
        let mut b = h.encode_unsigned();
        sign(&mut b, &k.key, nonce(), unix_secs());
        b
    }
    fn encode_unsigned(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        let op: u16 = match self.request {
            Request::Connect => 1,
            Request::RevokeKey => 2,
            Request::Fence => 3,
        };
        b[6..8].copy_from_slice(&op.to_le_bytes());
        b[8..12].copy_from_slice(&self.recv_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.client.to_le_bytes());
        b
    }
    /// The request part (the proof is [`Gate::admit`]'s to check).
    pub fn decode(b: &[u8]) -> Result<Hello, &'static str> {
        if b.len() < REQUEST_LEN || u32_at(b, 0) != MAGIC {
            return Err("no remora hello in the connect request");
        }
        if u16_at(b, 4) != VERSION {
            return Err("different protocol version");
        }
        let request = match u16_at(b, 6) {
            1 => Request::Connect,
            2 => Request::RevokeKey,
            3 => Request::Fence,
            _ => return Err("unknown request"),
        };
        Ok(Hello {
            request,
            recv_len: u32_at(b, 8),
            client: u32_at(b, 12),
        })
    }
}

/// Bytes of a hello's request part.
const REQUEST_LEN: usize = 16;
/// Bytes of a hello the tag covers: the request, the nonce and the time.
const SIGNED_LEN: usize = 32;
/// How far (seconds) a hello's time may be from the node's clock.
pub(crate) const CLOCK_WINDOW_S: u64 = 120;

/// The 128-bit tag of `msg` under `key`: SipHash-2-4 (a keyed PRF) keyed by each half of the
/// key in turn.
fn tag(key: &Key, msg: &[u8]) -> [u8; 16] {
    use std::hash::Hasher;
    let mut out = [0u8; 16];
    for (i, half) in key.chunks_exact(KEY_LEN / 2).enumerate() {
        // std's SipHasher is SipHash-2-4; its deprecation is about hashing for HashMap,
        // where a faster hasher was wanted, not about its strength as a keyed PRF.
        #[allow(deprecated)]
        let mut h = std::hash::SipHasher::new_with_keys(u64_at(half, 0), u64_at(half, 8));
        h.write(msg);
        out[8 * i..8 * i + 8].copy_from_slice(&h.finish().to_le_bytes());
    }
    out
}

fn sign(b: &mut [u8; Hello::LEN], key: &Key, nonce: u64, secs: u64) {
    b[16..24].copy_from_slice(&nonce.to_le_bytes());
    b[24..32].copy_from_slice(&secs.to_le_bytes());
    let t = tag(key, &b[..SIGNED_LEN]);
    b[SIGNED_LEN..Hello::LEN].copy_from_slice(&t);
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A fresh random nonce (the system's random source; the clock if it cannot be read).
fn nonce() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    match std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)) {
        Ok(()) => u64::from_le_bytes(b),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    }
}

/// The key a client signs its hellos with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientKey {
    pub key: Key,
    /// The client id the key belongs to (None: the node's key, proving no id).
    pub id: Option<u32>,
}

/// This process's key for memory nodes, from the file `REMORA_KEY_FILE` names (read once):
/// its first `<id> <key>` line if it has one, else the node's key; `None` without that
/// variable, or why the file cannot be used.
pub(crate) fn client_key() -> Result<Option<ClientKey>, String> {
    static KEY: OnceLock<Result<Option<ClientKey>, String>> = OnceLock::new();
    KEY.get_or_init(|| match std::env::var_os(KEY_FILE_ENV) {
        None => Ok(None),
        Some(p) => {
            let keys =
                read_keys(std::path::Path::new(&p)).map_err(|e| format!("{KEY_FILE_ENV}: {e}"))?;
            Ok(match (keys.clients.first(), keys.node) {
                (Some(&(id, key)), _) => Some(ClientKey { key, id: Some(id) }),
                (None, Some(key)) => Some(ClientKey { key, id: None }),
                (None, None) => None,
            })
        }
    })
    .clone()
}

/// Why a node refused a request for its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthRefusal {
    /// The hello proved no key.
    NoKey,
    /// Its tag is not the node's key's.
    WrongKey,
    /// Its time is more than [`CLOCK_WINDOW_S`] off the node's clock.
    Clock,
    /// Its nonce was admitted before (a replayed hello).
    Replay,
    /// It claims a client id the node has no key for.
    UnknownClient,
    /// It claims a client id, and is not signed with that client's key.
    NotThatClient,
}

/// A node's check of the key on every connect request (see the module docs).
pub(crate) struct Gate {
    /// The node's key (None: only listed clients are admitted).
    key: Option<Key>,
    /// Client ids and their keys (empty: a claimed id is believed, as before).
    clients: BTreeMap<u32, Key>,
    /// Nonces admitted within the clock window, with their times.
    seen: BTreeMap<u64, u64>,
}

impl Gate {
    /// A gate for `key`.
    #[cfg(test)]
    pub fn new(key: Key) -> Gate {
        Gate::with_clients(Some(key), &[])
    }

    /// A gate for the node's key and the clients' (see the module docs); None when there
    /// is no key at all (anyone who reaches the port is admitted).
    pub fn for_keys(key: Option<Key>, clients: &[(u32, Key)]) -> Option<Gate> {
        (key.is_some() || !clients.is_empty()).then(|| Gate::with_clients(key, clients))
    }

    fn with_clients(key: Option<Key>, clients: &[(u32, Key)]) -> Gate {
        Gate {
            key,
            clients: clients.iter().copied().collect(),
            seen: BTreeMap::new(),
        }
    }

    /// True when `id` is a listed client's (the node gives it to nobody else).
    pub fn lists(&self, id: u32) -> bool {
        self.clients.contains_key(&id)
    }

    /// Admits the hello `b` (private data of a connect request) at node time `now` (Unix
    /// seconds), or says why not.
    pub fn admit(&mut self, b: &[u8], now: u64) -> Result<(), AuthRefusal> {
        if b.len() < Hello::LEN || b[SIGNED_LEN..Hello::LEN].iter().all(|&x| x == 0) {
            return Err(AuthRefusal::NoKey);
        }
        let claimed = u32_at(b, 12);
        let connect = u16_at(b, 6) == 1;
        let (key, wrong) = if connect && claimed != 0 && !self.clients.is_empty() {
            match self.clients.get(&claimed) {
                Some(k) => (k, AuthRefusal::NotThatClient),
                None => return Err(AuthRefusal::UnknownClient),
            }
        } else {
            match &self.key {
                Some(k) => (k, AuthRefusal::WrongKey),
                None => return Err(AuthRefusal::WrongKey),
            }
        };
        let want = tag(key, &b[..SIGNED_LEN]);
        let diff = want
            .iter()
            .zip(&b[SIGNED_LEN..Hello::LEN])
            .fold(0u8, |d, (x, y)| d | (x ^ y));
        if diff != 0 {
            return Err(wrong);
        }
        let (nonce, secs) = (u64_at(b, 16), u64_at(b, 24));
        if secs.abs_diff(now) > CLOCK_WINDOW_S {
            return Err(AuthRefusal::Clock);
        }
        // A nonce older than the window cannot come back (its time would be refused).
        self.seen
            .retain(|_, t| t.saturating_add(2 * CLOCK_WINDOW_S) >= now);
        if self.seen.insert(nonce, secs).is_some() {
            return Err(AuthRefusal::Replay);
        }
        Ok(())
    }

    /// [`Gate::admit`] at the node's clock now.
    pub fn admit_now(&mut self, b: &[u8]) -> Result<(), AuthRefusal> {
        self.admit(b, unix_secs())
    }
}

/// Marks an [`Unauthorized`] reply.
const UNAUTHORIZED_TAG: u16 = 0x8004;

/// Node → client: a request refused for its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unauthorized {
    /// Why the node refused.
    pub why: AuthRefusal,
}

impl Unauthorized {
    /// Bytes on the wire: magic, version, tag, the reason code (u32), 4 zero bytes.
    pub const LEN: usize = 16;
    /// The reply as the node puts it in the reject.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&UNAUTHORIZED_TAG.to_le_bytes());
        let code: u32 = match self.why {
            AuthRefusal::NoKey => 1,
            AuthRefusal::WrongKey => 2,
            AuthRefusal::Clock => 3,
            AuthRefusal::Replay => 4,
            AuthRefusal::UnknownClient => 5,
            AuthRefusal::NotThatClient => 6,
        };
        b[8..12].copy_from_slice(&code.to_le_bytes());
        b
    }
    /// The refusal in a reject's private data, or `None` when it is not one (another reply,
    /// an unknown reason code, or no remora message at all).
    pub fn decode(b: &[u8]) -> Option<Unauthorized> {
        if b.len() < Self::LEN || u32_at(b, 0) != MAGIC || u16_at(b, 6) != UNAUTHORIZED_TAG {
            return None;
        }
        let why = match u32_at(b, 8) {
            1 => AuthRefusal::NoKey,
            2 => AuthRefusal::WrongKey,
            3 => AuthRefusal::Clock,
            4 => AuthRefusal::Replay,
            5 => AuthRefusal::UnknownClient,
            6 => AuthRefusal::NotThatClient,
            _ => return None,
        };
        Some(Unauthorized { why })
    }

    /// What the client should do, in its own terms (its key file, its clock).
    pub fn explain(&self) -> String {
        let mine = match client_key() {
            Ok(Some(k)) => format!(
                "the key in {}{}",
                std::env::var(KEY_FILE_ENV).unwrap_or_default(),
                k.id.map_or(String::new(), |id| format!(" (client {id:#x})"))
            ),
            Ok(None) => format!("no key ({KEY_FILE_ENV} is not set)"),
            Err(e) => format!("no key ({e})"),
        };
        match self.why {
            AuthRefusal::NoKey => format!(
                "it admits only clients with its key, and this one sent {mine}: set \
                 {KEY_FILE_ENV} to a copy of the node's --key-file"
            ),
            AuthRefusal::WrongKey => format!(
                "wrong key: this client sent {mine}, which is not the node's (another node's, \
                 or revoked)"
            ),
            AuthRefusal::Clock => format!(
                "this client's clock is more than {CLOCK_WINDOW_S} s off the node's: \
                 synchronise the clocks"
            ),
            AuthRefusal::Replay => "the hello was a replay of one it already admitted".into(),
            AuthRefusal::UnknownClient => format!(
                "this client (with {mine}) claims a client id the node has no key for: connect \
                 as a new client, or list `<id> <key>` in the node's key file and give the \
                 client that line"
            ),
            AuthRefusal::NotThatClient => format!(
                "this client (with {mine}) claims a client id whose key it does not hold: a \
                 client proves its id with its own `<id> <key>` line"
            ),
        }
    }
}

/// Where a memory node's device-memory addresses (`GlobalAddr`s with the device bit) point,
/// as it says in its welcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmKind {
    /// No device memory: device addresses fail with a remote access error.
    None,
    /// On-chip memory of the NIC (`ibv_alloc_dm`), registered zero-based.
    Device,
    /// The NIC has none: a host-memory region stands in for it.
    Host,
}

/// Node → client, in the accept: where the node's memory is and how to reach it.
/// [`Welcome::decode`] refuses one with a zero `recv_len`, `region_len` or `client`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Welcome {
    /// The node's id (what `GlobalAddr`s name it by).
    pub node: NodeId,
    /// Bytes of each of the node's receive buffers: the largest SEND it takes.
    pub recv_len: u32,
    /// Virtual address of the node's host region (region offset 0) for RDMA.
    pub region_addr: u64,
    /// Remote key of the host region.
    pub region_rkey: u32,
    /// Bytes of the host region.
    pub region_len: u64,
    /// What device-memory addresses point at.
    pub dm_kind: DmKind,
    /// RDMA address of device-memory offset 0 (0 for on-chip memory, registered
    /// zero-based; unused with [`DmKind::None`]).
    pub dm_addr: u64,
    /// Remote key of the device memory.
    pub dm_rkey: u32,
    /// Bytes of device memory (0 with [`DmKind::None`]).
    pub dm_len: u64,
    /// The service the node's CPU runs on every connection (`Handler::service`), NUL-padded
    /// ASCII; all zero from nodes that predate it, which ran only the echo service.
    pub service: [u8; 8],
    /// The client's id at the node: what it writes into lock words and what another client
    /// names to fence it (never 0).
    pub client: u32,
}

impl Welcome {
    /// The service name (`"echo"` for a node that did not say).
    pub fn service_name(&self) -> String {
        service_name(&self.service)
    }
    /// Bytes on the wire (68 used, 4 zero).
    pub const LEN: usize = 72;
    /// The welcome as the node puts it in the accept.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&self.node.to_le_bytes());
        b[8..12].copy_from_slice(&self.recv_len.to_le_bytes());
        let kind: u32 = match self.dm_kind {
            DmKind::None => 0,
            DmKind::Device => 1,
            DmKind::Host => 2,
        };
        b[12..16].copy_from_slice(&kind.to_le_bytes());
        b[16..24].copy_from_slice(&self.region_addr.to_le_bytes());
        b[24..28].copy_from_slice(&self.region_rkey.to_le_bytes());
        b[28..32].copy_from_slice(&self.dm_rkey.to_le_bytes());
        b[32..40].copy_from_slice(&self.region_len.to_le_bytes());
        b[40..48].copy_from_slice(&self.dm_addr.to_le_bytes());
        b[48..56].copy_from_slice(&self.dm_len.to_le_bytes());
        b[56..64].copy_from_slice(&self.service);
        b[64..68].copy_from_slice(&self.client.to_le_bytes());
        b
    }
    /// The welcome in an accept's private data, or why it is not a usable one.
    pub fn decode(b: &[u8]) -> Result<Welcome, &'static str> {
        if b.len() < Self::LEN || u32_at(b, 0) != MAGIC {
            return Err("no remora welcome in the accept");
        }
        if u16_at(b, 4) != VERSION {
            return Err("different protocol version");
        }
        let dm_kind = match u32_at(b, 12) {
            0 => DmKind::None,
            1 => DmKind::Device,
            2 => DmKind::Host,
            _ => return Err("unknown device-memory kind"),
        };
        let w = Welcome {
            node: u16_at(b, 6),
            recv_len: u32_at(b, 8),
            dm_kind,
            region_addr: u64_at(b, 16),
            region_rkey: u32_at(b, 24),
            dm_rkey: u32_at(b, 28),
            region_len: u64_at(b, 32),
            dm_addr: u64_at(b, 40),
            dm_len: u64_at(b, 48),
            service: b[56..64].try_into().expect("8 bytes"),
            client: u32_at(b, 64),
        };
        if w.recv_len == 0 || w.region_len == 0 {
            return Err("empty region or no receive buffers");
        }
        if w.client == 0 {
            return Err("the node assigned no client id");
        }
        Ok(w)
    }
}

/// A service name as [`Welcome::service`] carries it: the first 8 bytes, NUL-padded.
pub(crate) fn service_bytes(name: &str) -> [u8; 8] {
    let mut b = [0u8; 8];
    let n = name.len().min(8);
    b[..n].copy_from_slice(&name.as_bytes()[..n]);
    b
}

/// The name in [`Welcome::service`] bytes (`"echo"` when empty; `?` for bytes that are not
/// text).
pub(crate) fn service_name(b: &[u8; 8]) -> String {
    let n = b.iter().position(|&c| c == 0).unwrap_or(8);
    if n == 0 {
        return "echo".into();
    }
    match std::str::from_utf8(&b[..n]) {
        Ok(s) if s.bytes().all(|c| c.is_ascii_graphic()) => s.into(),
        _ => "?".into(),
    }
}

/// A revocation or fence refused for its key.
const REFUSED_KEY: &str = "the memory node refused the request: it needs its key (REMORA_KEY_FILE)";

/// Marks a [`Revoked`] reply (distinct from every [`Hello`] request code).
const REVOKED_TAG: u16 = 0x8002;

/// Node → client, in the reject answering a revocation: the region's key has changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Revoked {
    /// The host region's new remote key (the old one no longer works).
    pub new_rkey: u32,
}

impl Revoked {
    /// Bytes on the wire: magic, version, tag, the new key, 4 zero bytes.
    pub const LEN: usize = 16;
    /// The reply as the node puts it in the reject.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&REVOKED_TAG.to_le_bytes());
        b[8..12].copy_from_slice(&self.new_rkey.to_le_bytes());
        b
    }
    /// The reply in a reject's private data, or why the node did not revoke.
    pub fn decode(b: &[u8]) -> Result<Revoked, &'static str> {
        if Unauthorized::decode(b).is_some() {
            return Err(REFUSED_KEY);
        }
        if b.len() < Self::LEN || u32_at(b, 0) != MAGIC || u16_at(b, 6) != REVOKED_TAG {
            return Err("the memory node rejected the request without revoking");
        }
        Ok(Revoked {
            new_rkey: u32_at(b, 8),
        })
    }
}

/// Marks a [`Fenced`] reply.
const FENCED_TAG: u16 = 0x8003;

/// Node → client, in the reject answering a fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fenced {
    /// The client fenced (as the hello named it).
    pub client: u32,
    /// Connections of that client the node cut (0: it had none left: gone or fenced before).
    pub connections: u32,
}

impl Fenced {
    /// Bytes on the wire: magic, version, tag, the client, the connection count.
    pub const LEN: usize = 16;
    /// The reply as the node puts it in the reject.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&FENCED_TAG.to_le_bytes());
        b[8..12].copy_from_slice(&self.client.to_le_bytes());
        b[12..16].copy_from_slice(&self.connections.to_le_bytes());
        b
    }
    /// The reply in a reject's private data, or why the node did not fence.
    pub fn decode(b: &[u8]) -> Result<Fenced, &'static str> {
        if Unauthorized::decode(b).is_some() {
            return Err(REFUSED_KEY);
        }
        if b.len() < Self::LEN || u32_at(b, 0) != MAGIC || u16_at(b, 6) != FENCED_TAG {
            return Err("the memory node rejected the fence without fencing");
        }
        Ok(Fenced {
            client: u32_at(b, 8),
            connections: u32_at(b, 12),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_refuse_garbage() {
        let h = Hello {
            request: Request::RevokeKey,
            recv_len: 4096,
            client: 0,
        };
        let mut padded = h.encode().to_vec();
        padded.resize(56, 0);
        assert_eq!(Hello::decode(&padded), Ok(h));
        assert!(Hello::decode(&[0u8; 56]).is_err());
        assert!(Hello::decode(&padded[..8]).is_err());
        let w = Welcome {
            node: 3,
            recv_len: 4096,
            region_addr: 0x7f00_0000_0000,
            region_rkey: 0x1234,
            region_len: 1 << 30,
            dm_kind: DmKind::Host,
            dm_addr: 0x7e00_0000_0000,
            dm_rkey: 0x99,
            dm_len: 256 << 10,
            service: service_bytes("canrt"),
            client: 0x0300_0007,
        };
        assert_eq!(Welcome::decode(&w.encode()), Ok(w));
        assert!(
            Welcome::decode(&Welcome { client: 0, ..w }.encode()).is_err(),
            "a welcome without a client id"
        );
        let f = Hello {
            request: Request::Fence,
            recv_len: 0,
            client: 0x0300_0007,
        };
        assert_eq!(Hello::decode(&f.encode()), Ok(f));
        let fenced = Fenced {
            client: 0x0300_0007,
            connections: 1,
        };
        assert_eq!(Fenced::decode(&fenced.encode()), Ok(fenced));
        assert!(Fenced::decode(&Revoked { new_rkey: 3 }.encode()).is_err());
        assert_eq!(w.service_name(), "canrt");
        assert_eq!(service_name(&[0; 8]), "echo", "older nodes ran only echo");
        assert_eq!(service_name(&service_bytes("catfish-long")), "catfish-");
        assert_eq!(service_name(&[0xff, 1, 0, 0, 0, 0, 0, 0]), "?");
        let mut bad = w.encode();
        bad[12] = 7;
        assert!(Welcome::decode(&bad).is_err());
        let r = Revoked { new_rkey: 77 };
        assert_eq!(Revoked::decode(&r.encode()), Ok(r));
        assert!(Revoked::decode(&h.encode()).is_err());
    }

    #[test]
    fn the_gate_admits_only_a_fresh_hello_signed_with_its_key() {
        let key: Key = core::array::from_fn(|i| i as u8 * 7 + 1);
        let other: Key = core::array::from_fn(|i| i as u8 * 7 + 2);
        let h = Hello {
            request: Request::Connect,
            recv_len: 4096,
            client: 5,
        };
        let now = 1_800_000_000;
        let signed = |k: &Key, nonce: u64, secs: u64| {
            let mut b = h.encode_unsigned();
            sign(&mut b, k, nonce, secs);
            b
        };
        let mut gate = Gate::new(key);
        let ok = signed(&key, 11, now);
        assert_eq!(Hello::decode(&ok), Ok(h), "the request part is unchanged");
        assert_eq!(gate.admit(&ok, now + 3), Ok(()));
        assert_eq!(gate.admit(&ok, now + 4), Err(AuthRefusal::Replay));
        assert_eq!(
            gate.admit(&h.encode_unsigned(), now),
            Err(AuthRefusal::NoKey)
        );
        assert_eq!(gate.admit(&ok[..16], now), Err(AuthRefusal::NoKey));
        assert_eq!(
            gate.admit(&signed(&other, 12, now), now),
            Err(AuthRefusal::WrongKey)
        );
        assert_eq!(
            gate.admit(&signed(&key, 13, now - CLOCK_WINDOW_S - 1), now),
            Err(AuthRefusal::Clock)
        );
        // A signed hello whose request was changed (another client's id): the tag no longer
        // matches.
        let mut forged = signed(&key, 14, now);
        forged[12] ^= 1;
        assert_eq!(gate.admit(&forged, now), Err(AuthRefusal::WrongKey));
        // Any bit of the tag counts.
        let mut bent = signed(&key, 15, now);
        bent[47] ^= 0x80;
        assert_eq!(gate.admit(&bent, now), Err(AuthRefusal::WrongKey));
        assert_eq!(gate.admit(&signed(&key, 16, now), now), Ok(()));
        for why in [
            AuthRefusal::NoKey,
            AuthRefusal::WrongKey,
            AuthRefusal::Clock,
            AuthRefusal::Replay,
            AuthRefusal::UnknownClient,
            AuthRefusal::NotThatClient,
        ] {
            let u = Unauthorized { why };
            assert_eq!(Unauthorized::decode(&u.encode()), Some(u));
            let text = u.explain();
            assert!(!text.is_empty() && !text.contains("  "), "{text:?}");
            assert_eq!(Revoked::decode(&u.encode()), Err(REFUSED_KEY));
            assert_eq!(Fenced::decode(&u.encode()), Err(REFUSED_KEY));
        }
        assert_eq!(
            Unauthorized::decode(&Revoked { new_rkey: 1 }.encode()),
            None
        );
    }

    /// Issue 26, clients who are who they say: a node listing client keys admits a claim of
    /// id X only signed with X's key; the node's key, another client's key, or a claim of an
    /// unlisted id are refused with their own reasons; a new client (claim 0) and fences
    /// still need the node's key.
    #[test]
    fn a_claimed_client_id_must_be_proved_with_its_key() {
        let key = |m: u8, a: u8| -> Key {
            core::array::from_fn(|i| (i as u8).wrapping_mul(m).wrapping_add(a))
        };
        let (node, k5, k6) = (key(3, 1), key(5, 2), key(11, 3));
        let now = unix_secs();
        let mut gate = Gate::for_keys(Some(node), &[(5, k5), (6, k6)]).unwrap();
        assert!(gate.lists(5) && gate.lists(6) && !gate.lists(7));
        let hello = |client| Hello {
            request: Request::Connect,
            recv_len: 4096,
            client,
        };
        let as_node = ClientKey {
            key: node,
            id: None,
        };
        let as5 = ClientKey {
            key: k5,
            id: Some(5),
        };
        // Client 5 with its own key claims 5, whatever it was asked to claim.
        let b = hello(0).signed(&as5);
        assert_eq!(Hello::decode(&b).unwrap().client, 5);
        assert_eq!(gate.admit(&b, now), Ok(()));
        // A holder of the node's key passing for client 5, or 7 (unlisted): refused.
        assert_eq!(
            gate.admit(&hello(5).signed(&as_node), now),
            Err(AuthRefusal::NotThatClient)
        );
        assert_eq!(
            gate.admit(&hello(7).signed(&as_node), now),
            Err(AuthRefusal::UnknownClient)
        );
        // Client 5 passing for client 6 (its key, 6's id, signed by hand).
        let mut forged = hello(6).encode_unsigned();
        sign(&mut forged, &k5, 99, now);
        assert_eq!(gate.admit(&forged, now), Err(AuthRefusal::NotThatClient));
        // A new client with the node's key is admitted (the node gives it an id).
        assert_eq!(gate.admit(&hello(0).signed(&as_node), now), Ok(()));
        // A fence needs the node's key: client 5's is not it.
        let fence = Hello {
            request: Request::Fence,
            recv_len: 0,
            client: 6,
        };
        assert_eq!(
            gate.admit(&fence.signed(&as5), now),
            Err(AuthRefusal::WrongKey)
        );
        assert_eq!(gate.admit(&fence.signed(&as_node), now), Ok(()));
        // A node listing no clients believes a claim signed with its key, as before.
        let mut open = Gate::for_keys(Some(node), &[]).unwrap();
        assert_eq!(open.admit(&hello(5).signed(&as_node), now), Ok(()));
        assert!(Gate::for_keys(None, &[]).is_none());
        for why in [AuthRefusal::UnknownClient, AuthRefusal::NotThatClient] {
            let text = Unauthorized { why }.explain();
            assert!(text.contains("claims a client id"), "{text}");
        }
    }
}
