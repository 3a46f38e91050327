//! Connection keys: a memory node started with a key file admits only clients that send its
//! secret in their hello (on top of the control socket's file mode, which still says who
//! may reach the node at all). A client finds the key in the file `REMORA_KEY_FILE` names,
//! else next to the socket (`<socket>.key`); a key file it cannot read is its error.
//! Revoking means a new key file and a restart: the old key no longer opens a connection.
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
    let hex = text.trim();
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

/// Reads the key in `path` (hex text).
pub fn read_key(path: &Path) -> io::Result<Key> {
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_string(&mut text))
        .map_err(|e| io::Error::new(e.kind(), format!("key file {}: {e}", path.display())))?;
    parse(&text, path)
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
