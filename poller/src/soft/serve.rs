//! A memory node's thread serving one connection: hands what the client sent to the
//! service's handler and sends its replies, without ever waiting for the client (replies it
//! has no receive for wait in the queue pair's outbox, `SoftQp::send_or_queue`).
use super::qp::SoftQp;
use super::words::WordRegion;
use remora_core::fabric::{FabricError, QueuePair, RecvKind};
use remora_core::server::{Handler, Replies};

/// What a memory node tells a client it fenced (another client took over a lock the fenced
/// one held past its lease, `Endpoint::fence`), before it closes the connection: the client's
/// next verb fails with this reason (`FabricError::RemoteInvalid`), not with a dead peer.
pub(super) fn fence_farewell(node: remora_layouts::NodeId) -> String {
    format!(
        "memory node {node}: this client was fenced (another client took over a lock it \
         held past its lease) and its connection closed: reconnect"
    )
}

/// Handles what a departed client queued after the last look (its replies go nowhere): a
/// notice it sent just before it died is delivered, as a NIC delivers what it received.
pub(super) fn last_words(
    handler: &mut dyn Handler,
    replies: &mut Replies,
    region: &WordRegion<'_>,
    id: usize,
    qp: &SoftQp,
    buf: &mut [u8],
) {
    let mut others = Vec::new();
    let _ = serve_connection(handler, replies, region, id, qp, buf, &mut others);
}

pub(super) fn serve_connection(
    handler: &mut dyn Handler,
    replies: &mut Replies,
    region: &WordRegion<'_>,
    id: usize,
    qp: &SoftQp,
    buf: &mut [u8],
    others: &mut Vec<(usize, Vec<u8>)>,
) -> Result<usize, FabricError> {
    let mut n = 0;
    // Replies kept for a client that had no receive posted go first (see `send_or_queue`).
    let mut failed = qp.flush_outbox().err();
    // The first reply that could not be sent: the connection ends, but what the client had
    // queued is still handled (without replies): a NIC delivers what it received, whatever
    // became of the sender. Dropping it lost a killed CANRT writer's append notice, and its
    // data node waited on the dead ticket (issue 26).
    loop {
        let r = if failed.is_none() && !qp.is_broken() {
            qp.try_recv(buf)?
        } else {
            qp.take_queued(buf)?
        };
        let Some(r) = r else { break };
        let msg: &[u8] = if r.kind == RecvKind::Send {
            &buf[..r.len as usize]
        } else {
            &[]
        };
        replies.clear();
        handler.on_message(region, id, r, msg, replies)?;
        if failed.is_none() {
            for m in replies.iter() {
                if let Err(e) = qp.send_or_queue(m) {
                    failed = Some(e);
                    break;
                }
            }
            others.extend(replies.iter_other().map(|(to, m)| (to, m.to_vec())));
        }
        n += 1;
    }
    failed.map_or(Ok(n), Err)
}
