//! The echo service every memory node runs on its receive queues.
//!
//! It answers a SEND with a SEND of the same payload, and a WRITE_WITH_IMM with a 12-byte
//! SEND: `b"IMM!"`, the immediate and the written length (little-endian u32s). It lets a
//! client check two-sided delivery end to end, and `remora perf` measure SEND latency.
use crate::fabric::{FabricError, QueuePair, RecvKind};

/// First 4 bytes of the echo's reply to a WRITE_WITH_IMM.
pub const IMM_REPLY_TAG: [u8; 4] = *b"IMM!";

/// Encodes the reply to a WRITE_WITH_IMM.
pub fn imm_reply(imm: u32, len: u32) -> [u8; 12] {
    let mut r = [0u8; 12];
    r[..4].copy_from_slice(&IMM_REPLY_TAG);
    r[4..8].copy_from_slice(&imm.to_le_bytes());
    r[8..].copy_from_slice(&len.to_le_bytes());
    r
}

/// Decodes a reply to a WRITE_WITH_IMM: `(imm, len)`, or `None` for anything else.
pub fn parse_imm_reply(msg: &[u8]) -> Option<(u32, u32)> {
    if msg.len() != 12 || msg[..4] != IMM_REPLY_TAG {
        return None;
    }
    let imm = u32::from_le_bytes(msg[4..8].try_into().ok()?);
    let len = u32::from_le_bytes(msg[8..12].try_into().ok()?);
    Some((imm, len))
}

/// Serves every receive completion already there; returns how many it answered.
/// `buf` must hold the largest message (`qp.max_message()`).
pub async fn serve_ready<Q: QueuePair>(qp: &Q, buf: &mut [u8]) -> Result<usize, FabricError> {
    let mut served = 0;
    while let Some(r) = qp.try_recv(buf)? {
        match r.kind {
            RecvKind::Send => qp.send(&buf[..r.len as usize]).await?,
            RecvKind::WriteImm => qp.send(&imm_reply(r.imm.unwrap_or(0), r.len)).await?,
        }
        served += 1;
    }
    Ok(served)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imm_reply_round_trips_and_rejects_garbage() {
        assert_eq!(parse_imm_reply(&imm_reply(7, 4096)), Some((7, 4096)));
        assert_eq!(parse_imm_reply(b"IMM!1234"), None);
        assert_eq!(parse_imm_reply(&[0u8; 12]), None);
    }
}
