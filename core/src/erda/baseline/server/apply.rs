//! The baselines' asynchronous apply: records leave the log in order, into the hash table
//! and the data slots.
use super::*;

impl BaselineServer {
    /// Applies up to `max` of the oldest records, stopping at one not yet landed.
    pub(super) fn pump(
        &mut self,
        region: &dyn LocalRegion,
        max: usize,
    ) -> Result<usize, FabricError> {
        let mut done = 0;
        while done < max {
            let st = self.st.as_mut().expect("opened");
            let Some(q) = st.queue.front().copied() else {
                break;
            };
            if !q.landed {
                if !verify(region, st, q.pos, q.len)? {
                    if !self.stale(q.pos) {
                        break;
                    }
                    if self.void(region, q.pos, q.len)? {
                        continue;
                    }
                }
                let st = self.st.as_mut().expect("opened");
                let ks = st.keys.entry(q.key).or_default();
                ks.inflight = None;
                ks.latest = Some((q.pos, q.len, q.op));
            }
            self.apply(region, &q)?;
            let st = self.st.as_mut().expect("opened");
            st.queue.pop_front();
            st.queued_bytes = st.queued_bytes.saturating_sub(q.len.next_multiple_of(8));
            if let Some(ks) = st.keys.get_mut(&q.key) {
                if ks.latest.is_some_and(|(p, _, _)| p == q.pos) {
                    ks.latest = None;
                }
                if ks.latest.is_none() && ks.inflight.is_none() {
                    st.keys.remove(&q.key);
                }
            }
            self.stats.applied += 1;
            done += 1;
        }
        Ok(done)
    }

    /// Applies one landed record to the table and the data slots.
    pub(super) fn apply(
        &mut self,
        region: &dyn LocalRegion,
        q: &Queued,
    ) -> Result<(), FabricError> {
        let st = self.st.as_mut().expect("opened");
        let sb = st.sb;
        let n = q.len as usize;
        let off = ring_off(&sb, q.pos);
        region.read(off, &mut st.rec[..n])?;
        let Some(r) = decode_record(&st.rec[..n], q.pos) else {
            return Err(corrupt(region, off));
        };
        let (op, kl, vl) = (r.op, r.key.len(), r.value.len());
        let key = q.key;
        let key = &key.0[..key.1 as usize];
        let found = locate(region, st, key)?;
        if op == RecOp::Delete {
            if let Some((idx, _)) = found {
                // The paper's delete: the metadata set to 0 (here the control word too: the
                // bucket is free again); the data slot is left as it is.
                let b = sb.bucket_off(idx);
                region.store_u64(b, 0)?;
                region.store_u64(b + 8, 0)?;
                region.persist(b, 16);
                st.present[idx as usize] = false;
            }
            return Ok(());
        }
        // The data slot's image: header, key, value (the record's bytes after its header).
        let img = SLOT_HEADER + kl + vl;
        st.rec
            .copy_within(REC_HEADER..REC_HEADER + kl + vl, SLOT_HEADER);
        if let Some((idx, b)) = found.filter(|(_, b)| !b.meta().is_empty()) {
            let slot = sb
                .object_off(DATA, b.meta().new_off())
                .map_err(|_| corrupt(region, sb.bucket_off(idx)))?;
            let mut sh = [0u8; SLOT_HEADER];
            region.read(slot, &mut sh)?;
            let (_, _, cap) = slot_header(&sh);
            if vl <= cap {
                // In place: the paper's update writes the key-value pair only.
                put_slot_header(&mut st.rec, kl, vl, cap);
                region.write(slot, &st.rec[..img])?;
                region.persist(slot, img);
                return Ok(());
            }
            let units = alloc_slot(st, kl, vl).ok_or(FabricError::Unsupported {
                what: "baseline data area full",
            })?;
            let new = sb.object_off(DATA, units).map_err(|_| corrupt(region, 0))?;
            put_slot_header(&mut st.rec, kl, vl, vl);
            region.write(new, &st.rec[..img])?;
            region.persist(new, img);
            let m = Meta::EMPTY
                .advance(units)
                .map_err(|_| corrupt(region, new))?;
            region.store_u64(sb.bucket_off(idx), m.encode())?;
            region.persist(sb.bucket_off(idx), 8);
            return Ok(());
        }
        // A create: data slot, then the bucket's key and control word, then its metadata word.
        let idx = match found {
            Some((idx, _)) => idx,
            None => match free_bucket(region, st, key)? {
                Some(i) => i,
                None => {
                    let home = sb.home(key);
                    match displace::make_room(region, &sb, home, &mut st.present)? {
                        Some((i, moves)) => {
                            self.stats.displaced += moves;
                            i
                        }
                        None => {
                            return Err(FabricError::Unsupported {
                                what: "baseline hash table full",
                            });
                        }
                    }
                }
            },
        };
        let st = self.st.as_mut().expect("opened");
        let units = alloc_slot(st, kl, vl).ok_or(FabricError::Unsupported {
            what: "baseline data area full",
        })?;
        let slot = sb.object_off(DATA, units).map_err(|_| corrupt(region, 0))?;
        put_slot_header(&mut st.rec, kl, vl, vl);
        region.write(slot, &st.rec[..img])?;
        region.persist(slot, img);
        let boff = sb.bucket_off(idx);
        let b = Bucket::new(key, 0, Meta::EMPTY)
            .map_err(|_| corrupt(region, boff))?
            .encode();
        region.write(boff + 8, &b[8..])?;
        region.persist(boff + 8, BUCKET_LEN - 8);
        let m = Meta::EMPTY
            .advance(units)
            .map_err(|_| corrupt(region, boff))?;
        region.store_u64(boff, m.encode())?;
        region.persist(boff, 8);
        st.present[idx as usize] = true;
        Ok(())
    }
}

fn put_slot_header(b: &mut [u8], kl: usize, vl: usize, cap: usize) {
    b[0] = kl as u8;
    b[1] = 0;
    b[2..4].copy_from_slice(&(vl as u16).to_le_bytes());
    b[4..8].copy_from_slice(&(cap as u32).to_le_bytes());
}

/// A data slot for a key and value of these lengths, in units of the data area.
fn alloc_slot(st: &mut State, kl: usize, vl: usize) -> Option<u32> {
    let len = ((SLOT_HEADER + kl + vl) as u64).next_multiple_of(8);
    let at = st.data_cursor;
    if at + len > st.sb.head_bytes {
        return None;
    }
    st.data_cursor = at + len;
    u32::try_from(at / 8).ok()
}

/// The first unused bucket of `key`'s neighborhood (after `locate` filled the scratch).
fn free_bucket(
    region: &dyn LocalRegion,
    st: &mut State,
    key: &[u8],
) -> Result<Option<u64>, FabricError> {
    let sb = st.sb;
    let home = sb.home(key);
    region.read(sb.bucket_off(home), &mut st.scratch)?;
    for j in 0..sb.neighborhood as usize {
        let raw = &st.scratch[j * BUCKET_LEN..(j + 1) * BUCKET_LEN];
        let b = Bucket::decode(raw).map_err(|_| corrupt(region, sb.bucket_off(home + j as u64)))?;
        if !b.is_used() {
            return Ok(Some(home + j as u64));
        }
    }
    Ok(None)
}
