//! Keys as the tree sees them: fixed-length keys as given, variable-length keys with a NUL
//! terminator so that no key is a prefix of another (and byte order is preserved).
use super::config::{KeyMode, SmartError};
use remora_layouts::smart::MAX_KEY_LEN;

/// An encoded key, on the stack.
#[derive(Clone, Copy)]
pub(crate) struct Key {
    buf: [u8; MAX_KEY_LEN],
    len: usize,
}

impl Key {
    pub(crate) fn encode(mode: KeyMode, key: &[u8]) -> Result<Key, SmartError> {
        let mut k = Key {
            buf: [0; MAX_KEY_LEN],
            len: 0,
        };
        match mode {
            KeyMode::Fixed(n) => {
                Key::check_fixed(mode, key)?;
                k.buf[..n].copy_from_slice(key);
                k.len = n;
            }
            KeyMode::Variable => {
                if key.is_empty() || key.len() >= MAX_KEY_LEN {
                    return Err(SmartError::BadKey {
                        why: "variable keys are 1..=255 bytes",
                    });
                }
                if key.contains(&0) {
                    return Err(SmartError::BadKey {
                        why: "variable keys may not contain NUL bytes",
                    });
                }
                k.buf[..key.len()].copy_from_slice(key);
                k.len = key.len() + 1;
            }
        }
        Ok(k)
    }

    /// The encoded form of `key` when it is `key` itself (fixed-length keys), checked like
    /// [`Key::encode`]; `None` when the key must be encoded (variable-length keys).
    pub(crate) fn as_is(mode: KeyMode, key: &[u8]) -> Result<Option<&[u8]>, SmartError> {
        match mode {
            KeyMode::Fixed(_) => Key::check_fixed(mode, key).map(|()| Some(key)),
            KeyMode::Variable => Ok(None),
        }
    }

    fn check_fixed(mode: KeyMode, key: &[u8]) -> Result<(), SmartError> {
        match mode {
            KeyMode::Fixed(n) if key.len() != n => Err(SmartError::BadKey {
                why: "length differs from the tree's fixed key length",
            }),
            _ => Ok(()),
        }
    }

    /// A scan's lower bound: like [`Key::encode`], but fixed-mode bounds may be shorter.
    pub(crate) fn lower_bound(mode: KeyMode, from: &[u8]) -> Result<Key, SmartError> {
        match mode {
            KeyMode::Fixed(n) if from.len() <= n => {
                let mut k = Key {
                    buf: [0; MAX_KEY_LEN],
                    len: from.len(),
                };
                k.buf[..from.len()].copy_from_slice(from);
                Ok(k)
            }
            KeyMode::Variable if from.is_empty() => Ok(Key {
                buf: [0; MAX_KEY_LEN],
                len: 0,
            }),
            _ => Key::encode(mode, from),
        }
    }

    /// The smallest byte string greater than `k` (k followed by a zero byte), capped.
    pub(crate) fn successor(k: &[u8]) -> Key {
        let mut s = Key {
            buf: [0; MAX_KEY_LEN],
            len: 0,
        };
        let n = k.len().min(MAX_KEY_LEN - 1);
        s.buf[..n].copy_from_slice(&k[..n]);
        s.len = n + 1;
        s
    }

    /// Raw bytes as a key (truncated to the longest key).
    pub(crate) fn from_slice(b: &[u8]) -> Key {
        let mut k = Key {
            buf: [0; MAX_KEY_LEN],
            len: b.len().min(MAX_KEY_LEN),
        };
        k.buf[..k.len].copy_from_slice(&b[..k.len]);
        k
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The user's key from an internal one.
pub(crate) fn user_key(mode: KeyMode, internal: &[u8]) -> &[u8] {
    match mode {
        KeyMode::Fixed(_) => internal,
        KeyMode::Variable => &internal[..internal.len().saturating_sub(1)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings() {
        assert_eq!(
            Key::encode(KeyMode::Variable, b"ab").unwrap().bytes(),
            b"ab\0"
        );
        assert!(Key::encode(KeyMode::Variable, b"a\0b").is_err());
        assert!(Key::encode(KeyMode::Variable, b"").is_err());
        assert!(Key::encode(KeyMode::Fixed(8), b"1234567").is_err());
        assert!(Key::as_is(KeyMode::Fixed(8), b"1234567").is_err());
        assert_eq!(
            Key::as_is(KeyMode::Fixed(2), b"xy").unwrap(),
            Some(&b"xy"[..])
        );
        assert_eq!(Key::as_is(KeyMode::Variable, b"xy").unwrap(), None);
        assert_eq!(
            Key::encode(KeyMode::Fixed(2), b"xy").unwrap().bytes(),
            b"xy"
        );
        assert_eq!(Key::successor(b"ab").bytes(), b"ab\0");
        assert_eq!(user_key(KeyMode::Variable, b"ab\0"), b"ab");
        assert_eq!(
            Key::lower_bound(KeyMode::Fixed(8), b"a").unwrap().bytes(),
            b"a"
        );
        assert_eq!(
            Key::lower_bound(KeyMode::Variable, b"").unwrap().bytes(),
            b""
        );
    }
}
