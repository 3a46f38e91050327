//! What a client and a memory node tell each other in rdma_cm private data (there is no
//! other channel). All integers little-endian. The transport may pad private data with
//! zeros, so every message starts with a magic word and decoders ignore trailing bytes.
//!
//! - [`Hello`] (client → node, in the connect request, 16 bytes): what the client wants
//!   (a connection, the revocation of the region's key, or the fencing of a client), its
//!   receive-buffer size, and a client id (for a connection: the id the client already has
//!   from its first memory node, 0 to be given one; for a fence: the client to fence).
//! - [`Welcome`] (node → client, in the accept, 72 bytes): the node id, the host region's
//!   address/key/length, the device memory's address/key/length/kind, the node's
//!   receive-buffer size (the largest SEND it takes), the service, and the client's id.
//! - [`Revoked`] (node → client, in the reject answering a revocation, 16 bytes): the new key.
//! - [`Fenced`] (node → client, in the reject answering a fence, 16 bytes): the client fenced
//!   and how many of its connections were cut.
use remora_layouts::NodeId;

pub const MAGIC: u32 = u32::from_le_bytes(*b"RMV1");
pub const VERSION: u16 = 1;

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
pub enum Request {
    Connect,
    RevokeKey,
    /// Cut client `Hello::client` off the node (see `memnode.rs`).
    Fence,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub request: Request,
    pub recv_len: u32,
    /// Connect: the client's id (0: assign one). Fence: the client to fence.
    pub client: u32,
}

impl Hello {
    pub const LEN: usize = 16;
    pub fn encode(&self) -> [u8; Self::LEN] {
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
    pub fn decode(b: &[u8]) -> Result<Hello, &'static str> {
        if b.len() < Self::LEN || u32_at(b, 0) != MAGIC {
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

/// Where the node's device-memory addresses point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmKind {
    /// No device memory: device addresses fail with a remote access error.
    None,
    /// On-chip memory of the NIC (`ibv_alloc_dm`), registered zero-based.
    Device,
    /// The NIC has none: a host-memory region stands in for it.
    Host,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Welcome {
    pub node: NodeId,
    pub recv_len: u32,
    pub region_addr: u64,
    pub region_rkey: u32,
    pub region_len: u64,
    pub dm_kind: DmKind,
    pub dm_addr: u64,
    pub dm_rkey: u32,
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
    pub const LEN: usize = 72;
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
pub fn service_bytes(name: &str) -> [u8; 8] {
    let mut b = [0u8; 8];
    let n = name.len().min(8);
    b[..n].copy_from_slice(&name.as_bytes()[..n]);
    b
}

/// The name in [`Welcome::service`] bytes (`"echo"` when empty; `?` for bytes that are not
/// text).
pub fn service_name(b: &[u8; 8]) -> String {
    let n = b.iter().position(|&c| c == 0).unwrap_or(8);
    if n == 0 {
        return "echo".into();
    }
    match std::str::from_utf8(&b[..n]) {
        Ok(s) if s.bytes().all(|c| c.is_ascii_graphic()) => s.into(),
        _ => "?".into(),
    }
}

/// Marks a [`Revoked`] reply (distinct from every [`Hello`] request code).
const REVOKED_TAG: u16 = 0x8002;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revoked {
    pub new_rkey: u32,
}

impl Revoked {
    pub const LEN: usize = 16;
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&REVOKED_TAG.to_le_bytes());
        b[8..12].copy_from_slice(&self.new_rkey.to_le_bytes());
        b
    }
    pub fn decode(b: &[u8]) -> Result<Revoked, &'static str> {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fenced {
    pub client: u32,
    /// Connections of that client the node cut (0: it had none left: gone or fenced before).
    pub connections: u32,
}

impl Fenced {
    pub const LEN: usize = 16;
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&FENCED_TAG.to_le_bytes());
        b[8..12].copy_from_slice(&self.client.to_le_bytes());
        b[12..16].copy_from_slice(&self.connections.to_le_bytes());
        b
    }
    pub fn decode(b: &[u8]) -> Result<Fenced, &'static str> {
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
}
