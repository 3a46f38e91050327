//! Keyed memory nodes (issue 26): a client without the node's key, or with another, is
//! refused with a clear reason; with it, it connects; a key-less node admits as before.
use super::{NodeConfig, SoftMemoryNode, auth, control};

fn node() -> std::sync::Arc<SoftMemoryNode> {
    SoftMemoryNode::create(NodeConfig {
        region_len: 4 << 20,
        dm_len: 0,
        ..NodeConfig::default()
    })
    .unwrap()
}

#[test]
fn only_clients_with_the_key_connect() {
    let dir = std::env::temp_dir().join(format!("remora-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keyed = dir.join("keyed.sock");
    let key_file = dir.join("node.key");
    let _ = std::fs::remove_file(&key_file);
    let key = auth::load_or_create(&key_file).unwrap();
    // Made readable by its owner only, and read back the same.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "key file mode {mode:o}");
    assert_eq!(auth::load_or_create(&key_file).unwrap(), key);
    let n = node();
    let _l = control::listen_with(
        &n,
        &keyed,
        control::ListenOptions {
            key: Some(key),
            ..Default::default()
        },
    )
    .unwrap();
    let no_key = control::connect(&keyed)
        .err()
        .expect("admitted without a key");
    assert!(
        no_key.to_string().contains("needs a key"),
        "missing key: {no_key}"
    );
    let mut other = key;
    other[0] ^= 1;
    let wrong = control::connect_with_key(&keyed, Some(other))
        .err()
        .expect("admitted with a wrong key");
    assert!(
        wrong.to_string().contains("wrong key"),
        "wrong key: {wrong}"
    );
    control::connect_with_key(&keyed, Some(key)).expect("refused with the right key");
    // A client finds the key next to the socket.
    let mut beside = keyed.as_os_str().to_owned();
    beside.push(".key");
    std::fs::copy(&key_file, &beside).unwrap();
    control::connect(&keyed).expect("refused with the key beside the socket");
    std::fs::remove_file(&beside).unwrap();
    // A node without a key admits a client that sends one.
    let open = dir.join("open.sock");
    let m = node();
    let _m = control::listen(&m, &open).unwrap();
    control::connect_with_key(&open, Some(key)).expect("a key-less node refused");
    control::connect(&open).expect("a key-less node refused");
    let _ = std::fs::remove_dir_all(&dir);
}
