//! Connection keys: a memory node started with a key file admits only clients that send its
//! secret in their hello (on top of the control socket's file mode, which still says who
//! may reach the node at all). A client finds the key in the file `REMORA_KEY_FILE` names,
//! else next to the socket (`<socket>.key`); a key file it cannot read is its error.
//! Revoking means a new key file and a restart: the old key no longer opens a connection.
//!
//! **Client identities** (issue 26: clients who are who they say). A key file may also list
//! clients, one per line as `<client id> <key>` (the id in decimal or `0x` hex, the key in
//! hex), beside or instead of the node's key (a line of the key alone). On the verbs fabric
//! a client claims an id at connect (the one its first memory node gave it); a node whose
//! file lists clients admits a claim of an id only when the hello is signed with that id's
//! key, and refuses the claim of an id it has no key for, so that no key holder can pass for
//! another client. A client whose own key file holds such a line claims that id, signed
//! with its key. A node whose file lists no client keeps the older rule (a claim signed
//! with the node's key is believed). Soft clients claim nothing: the node gives each
//! connection its own slot.
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Bytes of a key.
pub const KEY_LEN: usize = 32;

/// A memory node's secret.
pub type Key = [u8; KEY_LEN];

/// The environment variable naming a client's key file.
pub const KEY_FILE_ENV: &str = "REMORA_KEY_FILE";

fn bad(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

fn parse(text: &str, path: &Path) -> io::Result<Key> {
    parse_hex(text.trim(), path)
}

fn parse_hex(hex: &str, path: &Path) -> io::Result<Key> {
    let mut key = [0u8; KEY_LEN];
    if hex.len() != 2 * KEY_LEN || !hex.is_ascii() {
        return Err(bad(format!(
            "key file {}: expected {} hex digits",
            path.display(),
            2 * KEY_LEN
        )));
    }
    for (i, b) in key.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| bad(format!("key file {}: not hex", path.display())))?;
    }
    Ok(key)
}

fn read_text(path: &Path) -> io::Result<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_string(&mut text))
        .map_err(|e| io::Error::new(e.kind(), format!("key file {}: {e}", path.display())))?;
    Ok(text)
}

/// Reads the key in `path` (hex text): the node's key of a file that also lists clients
/// (see [`read_keys`]).
pub fn read_key(path: &Path) -> io::Result<Key> {
    let text = read_text(path)?;
    if text.trim().lines().count() <= 1 {
        return parse(&text, path);
    }
    parse_keys(&text, path)?.node.ok_or_else(|| {
        bad(format!(
            "key file {}: no line with the node's key alone",
            path.display()
        ))
    })
}

/// The keys of a key file: the node's (a line of the key alone) and the clients' (lines
/// `<client id> <key>`; see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keys {
    /// The node's key.
    pub node: Option<Key>,
    /// Client ids and their keys, in the file's order (ids are not 0 and appear once).
    pub clients: Vec<(u32, Key)>,
}

fn parse_keys(text: &str, path: &Path) -> io::Result<Keys> {
    let mut keys = Keys::default();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |why: &str| bad(format!("key file {} line {}: {why}", path.display(), n + 1));
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some(k), None, None) => {
                if keys.node.replace(parse_hex(k, path)?).is_some() {
                    return Err(at("a second node key"));
                }
            }
            (Some(id), Some(k), None) => {
                let id = match id.strip_prefix("0x") {
                    Some(h) => u32::from_str_radix(h, 16),
                    None => id.parse(),
                }
                .map_err(|_| at("expected `<client id> <key>`"))?;
                if id == 0 {
                    return Err(at("client id 0 names no client"));
                }
                if keys.clients.iter().any(|c| c.0 == id) {
                    return Err(at("a client listed twice"));
                }
                keys.clients.push((id, parse_hex(k, path)?));
            }
            _ => return Err(at("expected a key, or `<client id> <key>`")),
        }
    }
    if keys.node.is_none() && keys.clients.is_empty() {
        return Err(bad(format!("key file {}: no key", path.display())));
    }
    Ok(keys)
}

/// Reads every key in `path` (see [`Keys`]).
pub fn read_keys(path: &Path) -> io::Result<Keys> {
    parse_keys(&read_text(path)?, path)
}

/// The key in `path`, made (from the system's random source, readable by its owner only)
/// if there is no such file yet.
pub fn load_or_create(path: &Path) -> io::Result<Key> {
    match read_key(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        r => return r,
    }
    let mut key = [0u8; KEY_LEN];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("key file {}: {e}", path.display())))?;
    f.write_all(format!("{hex}\n").as_bytes())?;
    Ok(key)
}

/// The key file a client uses for the memory node at `socket`: `REMORA_KEY_FILE`, else
/// `<socket>.key` if it exists.
pub fn client_key_file(socket: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(KEY_FILE_ENV) {
        return Some(PathBuf::from(p));
    }
    let mut p = socket.as_os_str().to_owned();
    p.push(".key");
    let p = PathBuf::from(p);
    p.exists().then_some(p)
}

/// The key a client sends to the memory node at `socket`, if it has one it can read.
pub fn client_key(socket: &Path) -> io::Result<Option<Key>> {
    client_key_file(socket).map(|p| read_key(&p)).transpose()
}

/// Compares two keys in time independent of where they differ.
pub(crate) fn same(a: &Key, b: &Key) -> bool {
    a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}
