//! Bulk loading (issue 25): a store's keys written at memory speed by the server's own write
//! path, without the fabric, instead of one request, grant and client WRITE per key.
//!
//! **What it builds: what upserts of the keys, in the given order, by one session leave.**
//! Each key goes through [`ErdaServer::grant`] exactly as a client's upsert request does
//! (bucket found or filled, with hopscotch displacement when the neighbourhood is full;
//! log space reserved in the key's head, chaining the next region when one is full; the
//! metadata word flipped and persisted), as the request of client id 0 (the first mailbox
//! of the first session: its keys go to head 0, as a load by clients writing from the first
//! mailbox of their 16 does with `remora bench`'s 2 heads). Then the object is written as
//! the client writes it (header, key, value, CRC-32C: [`encode_object_with`]), persisted,
//! and followed by its durable mark, so the grant is finished and the server forgets it, as
//! it does a client's finished grant; and the server's step after each request (the
//! cleaner's bounded step, zeroing ahead) runs as after a message. What differs from a load
//! by concurrent clients is only the order of the grants (theirs interleave), so log offsets
//! and which bucket of a full neighbourhood a key takes can differ: the keys, values,
//! buckets' neighbourhoods, words, objects and marks are of the same kind, every one as the
//! write path leaves it.
//!
//! **Persisted as the write path persists it.** Word first (by the grant), then the whole
//! object, then its mark: a crash in the middle leaves at most one key whose newest object
//! is not whole (or has no mark), which recovery ([`ErdaServer::recover`]) reverts or
//! empties, as after a writer's crash; after the load, recovery finds every word naming a
//! whole object and changes nothing.
use super::*;
use remora_layouts::erda::OBJECT_MAX;

/// The connection id the bulk load's grants are made on (no fabric connection has it).
const BULK_CONN: usize = usize::MAX;
/// The client id (mailbox) the bulk load's grants are made as (see the module doc).
const BULK_CLIENT: u32 = 0;

/// What a bulk load wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BulkStats {
    /// Keys written (buckets filled, or updated for a key given twice).
    pub keys: u64,
    /// Log bytes of the objects and their durable marks.
    pub log_bytes: u64,
    /// Buckets filled for new keys.
    pub buckets: u64,
    /// Bucket entries moved by hopscotch displacement.
    pub displaced: u64,
    /// Log regions chained to a head whose region was full.
    pub chained: u64,
}

fn refused(status: Status) -> FabricError {
    FabricError::Unsupported {
        what: match status {
            Status::TableFull => "erda bulk load: the hash table is full",
            Status::LogFull => "erda bulk load: a head's log is full",
            _ => "erda bulk load: the server refused a grant",
        },
    }
}

impl ErdaServer {
    /// Writes `entries` (key of 1 to 16 bytes, value) into `region`, which must hold no store
    /// yet (it is formatted first), as upserts of them in this order by one session leave the
    /// store (see the module doc); this server then serves it. A bad key or value, a full
    /// table or log fails the load with a clear error.
    pub fn bulk_load<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        region: &dyn LocalRegion,
        entries: impl IntoIterator<Item = (K, V)>,
    ) -> Result<BulkStats, FabricError> {
        if self.st.is_some() || region.load_u64(root_offset(ROOT_SLOT))? != 0 {
            return Err(FabricError::Unsupported {
                what: "erda bulk load needs a region holding no store",
            });
        }
        self.open(region)?;
        let before = self.stats;
        let mut out = BulkStats::default();
        let mut obj = vec![0u8; OBJECT_MAX];
        for (i, (k, v)) in entries.into_iter().enumerate() {
            let (key, value) = (k.as_ref(), v.as_ref());
            let req = Request::new(ReqOp::Upsert, i as u32, key, value.len()).map_err(|_| {
                FabricError::Unsupported {
                    what: "erda bulk load: keys are 1 to 16 bytes, values at most VALUE_MAX",
                }
            })?;
            let reply = self.bulk_grant(region, &req)?;
            let units = reply.arg as u32;
            let st = self.st.as_mut().expect("opened");
            let off = st
                .sb
                .object_off(reply.head, units)
                .map_err(|_| corrupt(region, st.sb_off))?;
            let n = encode_object_with(&mut obj, key, value, false, crate::erda::object_checksum)
                .map_err(|_| corrupt(region, off))?;
            // As the client writes it: the object, then (after the flush) its durable mark.
            region.write(off, &obj[..n])?;
            region.persist(off, n);
            region.write(off + n as u64, &durable_mark(units).to_le_bytes())?;
            region.persist(off + n as u64, DURABLE_MARK_LEN);
            // Finished: forgotten, as the client's next request would have it.
            let kb = key_buf(key);
            if st
                .pending
                .get(&kb)
                .is_some_and(|p| is_durable(region, &st.sb, p))
            {
                st.pending.remove(&kb);
            }
            st.last_grant[BULK_CLIENT as usize] = None;
            out.keys += 1;
            out.log_bytes += (n + DURABLE_MARK_LEN) as u64;
            self.after_request(region);
        }
        let s = self.stats;
        out.buckets = s.inserts - before.inserts;
        out.displaced = s.displaced - before.displaced;
        out.chained = s.chained - before.chained;
        Ok(out)
    }

    /// A grant of `req`, as the message path makes it: with a message's zeroing budget, and
    /// when the head's next log region is still being zeroed (`Busy` naming no grant: a
    /// client would back off and ask again), after zeroing it as an idle server does.
    fn bulk_grant(
        &mut self,
        region: &dyn LocalRegion,
        req: &Request,
    ) -> Result<Reply, FabricError> {
        for _ in 0..3 {
            let st = self.st.as_mut().expect("opened");
            clean::set_zero_budget(st, clean::ZERO_PER_MESSAGE);
            let reply = self.grant(region, BULK_CONN, BULK_CLIENT, req)?;
            match reply.status {
                Status::Granted => {
                    self.stats.grants += 1;
                    return Ok(reply);
                }
                Status::Busy => {
                    let st = self.st.as_mut().expect("opened");
                    let whole = st.region_bytes;
                    clean::set_zero_budget(st, whole);
                    clean::zero_ahead(region, st, &mut self.stats, true)?;
                }
                other => {
                    self.stats.refused += 1;
                    return Err(refused(other));
                }
            }
        }
        Err(FabricError::Unsupported {
            what: "erda bulk load: the next log region never became ready",
        })
    }
}
