//! Format of a baseline store and its crash recovery: the replay of every whole record
//! of the ring not yet applied.
use super::*;

impl BaselineServer {
    pub(super) fn open(&mut self, region: &dyn LocalRegion) -> Result<(), FabricError> {
        if self.st.is_some() {
            return Ok(());
        }
        let bad = |what| FabricError::Unsupported { what };
        let root = region.load_u64(root_offset(ROOT_SLOT))?;
        if root != 0 {
            return self.recover_store(region, root);
        }
        let c = self.cfg;
        if c.neighborhood == 0 {
            return Err(bad("baseline config: a neighborhood of at least 1"));
        }
        let buckets = c.buckets + c.neighborhood as u64 - 1;
        let table = buckets * BUCKET_LEN as u64;
        let stripes = (buckets.div_ceil(STRIPE_BUCKETS) + 1) * 8;
        let meta_len =
            (SUPERBLOCK_LEN as u64 + table + MAILBOX_LEN as u64 + stripes).next_multiple_of(64);
        let total = meta_len + 2 * c.head_bytes;
        let base = crate::server::claim_chunks(region, total)?
            .ok_or(bad("baseline store does not fit in the region"))?;
        let mut head_base = [0u64; MAX_HEADS];
        head_base[0] = base + meta_len;
        head_base[1] = base + meta_len + c.head_bytes;
        let table_off = base + SUPERBLOCK_LEN as u64;
        let sb = Superblock {
            magic: SUPERBLOCK_MAGIC,
            version: SUPERBLOCK_VERSION,
            heads: 2,
            buckets,
            neighborhood: c.neighborhood,
            max_clients: 1,
            table_off,
            mailbox_off: table_off + table,
            segment_bytes: c.segment_bytes,
            head_bytes: c.head_bytes,
            head_base,
        };
        sb.validate(region.len())
            .map_err(|_| bad("baseline config does not form a valid store"))?;
        let zero = [0u8; 4096];
        let mut off = sb.table_off;
        while off < sb.table_off + table {
            let n = (sb.table_off + table - off).min(zero.len() as u64) as usize;
            region.write(off, &zero[..n])?;
            off += n as u64;
        }
        region.persist(sb.table_off, table as usize);
        stripe::reset(region, &sb)?;
        region.store_u64(sb.mailbox(0), 0)?;
        region.persist(sb.mailbox(0), 8);
        region.write(base, &sb.encode())?;
        region.persist(base, SUPERBLOCK_LEN);
        region.store_u64(root_offset(ROOT_SLOT), base)?;
        region.persist(root_offset(ROOT_SLOT), 8);
        self.st = Some(State {
            sb,
            data_cursor: DATA_START,
            cursor: 0,
            queue: VecDeque::new(),
            queued_bytes: 0,
            keys: BTreeMap::new(),
            present: vec![false; sb.buckets as usize],
            applied: 0,
            scratch: vec![0u8; sb.neighborhood as usize * BUCKET_LEN],
            rec: vec![0u8; MAX_MESSAGE],
            steps: 0,
            voided: VecDeque::new(),
            forgot: None,
        });
        Ok(())
    }

    /// Restart on a store of a previous life: dedupes an interrupted displacement, rebuilds
    /// the volatile state from the table (presence, the data area's end), then replays every
    /// whole record of the ring in `[applied, applied + ring)` in position order (the records
    /// are absolute: an update is replayed as an upsert, a delete of an absent key is
    /// nothing), and persists the new applied position.
    pub(super) fn recover_store(
        &mut self,
        region: &dyn LocalRegion,
        root: u64,
    ) -> Result<(), FabricError> {
        let mut raw = [0u8; SUPERBLOCK_LEN];
        region.read(root, &mut raw)?;
        let sb = Superblock::decode(&raw, region.len()).map_err(|_| corrupt(region, root))?;
        if sb.heads != 2 || sb.max_clients != 1 {
            return Err(FabricError::Unsupported {
                what: "the published store is not a baseline store",
            });
        }
        stripe::reset(region, &sb)?;
        displace::dedupe(region, &sb)?;
        let mut present = vec![false; sb.buckets as usize];
        let mut data_end = DATA_START;
        let mut b = [0u8; BUCKET_LEN];
        for i in 0..sb.buckets {
            let off = sb.bucket_off(i);
            region.read(off, &mut b)?;
            let Ok(bucket) = Bucket::decode(&b) else {
                region.write(off, &[0u8; BUCKET_LEN])?;
                region.persist(off, BUCKET_LEN);
                continue;
            };
            if !bucket.is_used() || bucket.meta().is_empty() {
                continue;
            }
            present[i as usize] = true;
            let units = bucket.meta().new_off();
            if let Ok(slot) = sb.object_off(DATA, units) {
                let mut sh = [0u8; SLOT_HEADER];
                region.read(slot, &mut sh)?;
                let (kl, _, cap) = slot_header(&sh);
                let end = units as u64 * 8 + (SLOT_HEADER + kl + cap) as u64;
                data_end = data_end.max(end.min(sb.head_bytes).next_multiple_of(8));
            }
        }
        let applied = region.load_u64(sb.mailbox(0))?;
        let ring = sb.head_bytes;
        self.st = Some(State {
            sb,
            data_cursor: data_end,
            cursor: applied,
            queue: VecDeque::new(),
            queued_bytes: 0,
            keys: BTreeMap::new(),
            present,
            applied,
            scratch: vec![0u8; sb.neighborhood as usize * BUCKET_LEN],
            rec: vec![0u8; MAX_MESSAGE],
            steps: 0,
            voided: VecDeque::new(),
            forgot: None,
        });
        // Every 8-byte offset of the ring stands for one position in [applied, applied+ring).
        let mut found: Vec<(u64, u64, RecOp, KeyBuf)> = Vec::new();
        let st = self.st.as_mut().expect("just set");
        for o in (0..ring).step_by(8) {
            let pos = applied + (o + ring - applied % ring) % ring;
            let mut h = [0u8; REC_HEADER];
            region.read(ring_off(&sb, pos), &mut h)?;
            let (kl, vl) = (h[1] as usize, u16::from_le_bytes([h[2], h[3]]) as usize);
            let len = record_len(kl, vl) as u64;
            if RecOp::from_u8(h[0]).is_none() || kl == 0 || kl > KEY_MAX || o + len > ring {
                continue;
            }
            let n = len as usize;
            region.read(ring_off(&sb, pos), &mut st.rec[..n])?;
            if let Some(r) = decode_record(&st.rec[..n], pos) {
                let (op, key) = (r.op, key_buf(r.key));
                // A RAW record followed by its void word was voided: it never counted.
                let void_at = o + len.next_multiple_of(8);
                if self.scheme == Scheme::Raw
                    && void_at + 8 <= ring
                    && region.load_u64(ring_off(&sb, pos) + len.next_multiple_of(8))?
                        == void_word(pos)
                {
                    continue;
                }
                found.push((pos, len, op, key));
            }
        }
        found.sort_unstable_by_key(|f| f.0);
        let replayed = found.len() as u64;
        for (pos, len, op, key) in found {
            let q = Queued {
                pos,
                len,
                key,
                op,
                landed: true,
                at: 0,
            };
            self.apply(region, &q)?;
            let end = pos + self.slot_len(len);
            let st = self.st.as_mut().expect("just set");
            st.cursor = st.cursor.max(end);
        }
        let st = self.st.as_mut().expect("just set");
        st.applied = st.cursor;
        region.store_u64(sb.mailbox(0), st.cursor)?;
        region.persist(sb.mailbox(0), 8);
        self.stats.replayed += replayed;
        Ok(())
    }
}
