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

/// Key files listing clients (`<id> <key>` lines) parse into the node's key and the clients'
/// (issue 26); a malformed line, id 0, a client listed twice or a file with no key are
/// clear errors naming the line; `read_key` still finds the node's key.
#[test]
fn key_files_list_client_ids_and_their_keys() {
    let dir = std::env::temp_dir().join(format!("remora-auth-ids-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("ids.key");
    let hex = |b: u8| format!("{b:02x}").repeat(auth::KEY_LEN);
    let write = |text: &str| std::fs::write(&f, text).unwrap();
    write(&format!(
        "# the node\n{}\n5 {}\n0x0100002a {}\n",
        hex(1),
        hex(5),
        hex(7)
    ));
    let keys = auth::read_keys(&f).unwrap();
    assert_eq!(keys.node, Some([1u8; auth::KEY_LEN]));
    assert_eq!(
        keys.clients,
        vec![
            (5, [5u8; auth::KEY_LEN]),
            (0x0100_002a, [7u8; auth::KEY_LEN])
        ]
    );
    assert_eq!(auth::read_key(&f).unwrap(), [1u8; auth::KEY_LEN]);
    // A client's own file: its line alone.
    write(&format!("5 {}\n", hex(5)));
    let mine = auth::read_keys(&f).unwrap();
    assert_eq!((mine.node, mine.clients.len()), (None, 1));
    for (text, want) in [
        (format!("0 {}\n", hex(5)), "client id 0"),
        (format!("5 {}\n5 {}\n", hex(5), hex(6)), "listed twice"),
        (format!("x {}\n", hex(5)), "<client id> <key>"),
        (format!("5 {} extra\n", hex(5)), "line 1"),
        ("# nothing\n".to_string(), "no key"),
    ] {
        write(&text);
        let e = auth::read_keys(&f).unwrap_err().to_string();
        assert!(e.contains(want), "{text:?}: {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
