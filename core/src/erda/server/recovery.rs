//! Format and crash recovery of Erda's store, and the settling of a dead writer's grant.
use super::*;

impl ErdaServer {
    pub(super) fn format(&mut self, region: &dyn LocalRegion) -> Result<State, FabricError> {
        let c = self.cfg;
        let bad = |why| FabricError::Unsupported { what: why };
        // The geometry's rules, as `ErdaConfig::check` saw them at start (the base moves
        // nothing but the offsets).
        let geometry = |e| match e {
            ErdaConfigError::Geometry(why) => bad(why),
            _ => bad("erda config does not form a valid store"),
        };
        let total = plan(&c, 0).map_err(geometry)?.total;
        // Before other indexes allocate on this node (see `claim_chunks`).
        let base = crate::server::claim_chunks(region, total)?
            .ok_or(bad("erda store does not fit in the region"))?;
        let Plan {
            sb,
            table_len: table,
            regions,
            ..
        } = plan(&c, base).map_err(geometry)?;
        sb.validate(region.len())
            .map_err(|_| bad("erda config does not form a valid store"))?;
        // Fresh chunks are zero; clear the table anyway (a region reused by a test).
        let zero = [0u8; 4096];
        let mut off = sb.table_off;
        while off < sb.table_off + table {
            let n = (sb.table_off + table - off).min(zero.len() as u64) as usize;
            region.write(off, &zero[..n])?;
            off += n as u64;
        }
        region.persist(sb.table_off, table as usize);
        stripe::reset(region, &sb)?;
        let first = HeadState {
            epoch: 0,
            first: 0,
            len: 1,
            src: 0,
            regions: regions as u8,
        };
        for h in 0..c.heads as u8 {
            region.store_u64(sb.head_state_off(h), first.encode())?;
        }
        region.persist(sb.head_state_off(0), c.heads as usize * 8);
        region.write(base, &sb.encode())?;
        region.persist(base, SUPERBLOCK_LEN);
        region.store_u64(root_offset(ROOT_SLOT), base)?;
        region.persist(root_offset(ROOT_SLOT), 8);
        Ok(self.fresh_state(sb, base, [first; MAX_HEADS]))
    }

    fn fresh_state(&self, sb: Superblock, sb_off: u64, runs: [HeadState; MAX_HEADS]) -> State {
        let region_bytes =
            sb.head_bytes / u64::from(runs[0].regions.max(1)) / sb.segment_bytes * sb.segment_bytes;
        State {
            runs,
            region_bytes,
            appended: [0; MAX_HEADS],
            threshold: (region_bytes * u64::from(self.cfg.clean_permille) / 1000).max(1),
            cleaners: core::array::from_fn(|_| Cleaner::default()),
            prep: [Prep::NONE; MAX_HEADS],
            zero_budget: 0,
            sb,
            sb_off,
            cursor: [LOG_START; MAX_HEADS],
            present: vec![false; sb.buckets as usize],
            owners: vec![None; sb.max_clients as usize],
            fabric: vec![0; sb.max_clients as usize],
            pending: BTreeMap::new(),
            last_grant: vec![None; sb.max_clients as usize],
            sweep_from: None,
            scratch: vec![0u8; sb.neighborhood as usize * BUCKET_LEN],
            scratch_obj: [0u8; object_len(KEY_MAX, 0)],
        }
    }

    /// Reads the object at (head, units) and says whether it verifies for `key`; returns
    /// (valid, deleted, length).
    fn check_object(
        region: &dyn LocalRegion,
        sb: &Superblock,
        head: u8,
        units: u32,
        key: &[u8],
        buf: &mut [u8],
    ) -> (bool, bool, u64) {
        read_object_at(region, sb, head, units, key, buf)
    }

    /// Repairs every bucket whose newest object does not verify, rebuilds the presence
    /// bits, and moves each head's append point past every referenced object.
    pub(super) fn recover(
        &mut self,
        region: &dyn LocalRegion,
        sb_off: u64,
    ) -> Result<State, FabricError> {
        let mut raw = [0u8; SUPERBLOCK_LEN];
        region.read(sb_off, &mut raw)?;
        let sb = Superblock::decode(&raw, region.len()).map_err(|_| corrupt(region, sb_off))?;
        let mut runs = [HeadState {
            epoch: 0,
            first: 0,
            len: 1,
            src: 0,
            regions: 1,
        }; MAX_HEADS];
        for (h, r) in runs.iter_mut().enumerate().take(sb.heads as usize) {
            let off = sb.head_state_off(h as u8);
            *r = HeadState::decode(region.load_u64(off)?).map_err(|_| corrupt(region, off))?;
        }
        if runs
            .iter()
            .take(sb.heads as usize)
            .any(|r| r.regions != runs[0].regions)
        {
            return Err(corrupt(region, sb.head_state_off(0)));
        }
        let mut st = self.fresh_state(sb, sb_off, runs);
        let rb = st.region_bytes;
        // A crash inside a change of buckets leaves its stripes odd; no reader is connected.
        stripe::reset(region, &sb)?;
        self.stats.deduplicated += displace::dedupe(region, &sb)?;
        let mut high = [0u64; MAX_HEADS];
        let mut obj = vec![0u8; remora_layouts::erda::OBJECT_MAX];
        let mut b = [0u8; BUCKET_LEN];
        for i in 0..sb.buckets {
            let off = sb.bucket_off(i);
            region.read(off, &mut b)?;
            let Ok(bucket) = Bucket::decode(&b) else {
                // A bucket that does not decode (media corruption): forget it.
                region.write(off, &[0u8; BUCKET_LEN])?;
                region.persist(off, BUCKET_LEN);
                self.stats.emptied += 1;
                continue;
            };
            let mut meta = bucket.meta();
            if bucket.is_used() && meta.is_empty() {
                // A fill or a cleaner's reclaim cut short: no object was ever granted to it
                // (a grant's reply follows its word), or its key was deleted. Free it.
                region.write(off, &[0u8; BUCKET_LEN])?;
                region.persist(off, BUCKET_LEN);
                self.stats.emptied += 1;
                continue;
            }
            if !bucket.is_used() {
                continue;
            }
            let head = bucket.head();
            let key = bucket.key();
            let mut newest = Self::check_object(region, &sb, head, meta.new_off(), key, &mut obj);
            if !newest.0 {
                let old = Self::check_object(region, &sb, head, meta.old_off(), key, &mut obj);
                meta = if old.0 {
                    self.stats.reverted += 1;
                    meta.revert()
                } else {
                    self.stats.emptied += 1;
                    Meta::EMPTY
                };
                newest = old;
                region.store_u64(off, meta.encode())?;
                region.persist(off, 8);
            }
            st.present[i as usize] = newest.0 && !newest.1;
            // Offsets named before any revert count too: a slot granted but never whole is
            // never granted again (its writer's late bytes could not land in another object).
            // Only the run's last region takes appends: the cursor goes past what the
            // words name there.
            let named = bucket.meta();
            for u in [named.new_off(), named.old_off()] {
                if u != 0 && (head as usize) < MAX_HEADS {
                    let run = st.runs[head as usize];
                    if region_of(rb, u) != run.nth(run.len - 1) {
                        continue;
                    }
                    let end =
                        u as u64 * 8 + (remora_layouts::erda::OBJECT_MAX + DURABLE_MARK_LEN) as u64;
                    high[head as usize] = high[head as usize].max(end);
                }
            }
        }
        let heads = sb.heads as usize;
        for (h, &high) in high.iter().enumerate().take(heads) {
            // Past every referenced object (its largest possible size), on a segment start:
            // space granted but never written is not reused (a full region chains the next).
            let run = st.runs[h];
            let start = region_start(rb, run.nth(run.len - 1));
            st.cursor[h] = start.max(high.next_multiple_of(sb.segment_bytes));
            if run.cleaning() {
                // A cleaning cut short begins again (its copies so far stay valid).
                st.cleaners[h] = Cleaner::start(run);
            }
        }
        Ok(st)
    }
}

/// Settles the unfinished grant `p` of `key` whose writer can no longer write (fenced, or
/// its connection ended): the grant is still the key's newest (one write in flight per key).
/// - Its object is whole: readers may already have returned it, so it stays the key's value;
///   it is not known durable (its writer never flushed it), so the server writes a durable
///   copy in fresh log space and names the copy in place of the original, keeping the older
///   object named (**adopted**).
/// - It is not whole: no reader ever saw it; the word reverts to the older object (the last
///   acknowledged value) and the slot is zeroed (**reverted**).
pub(super) fn settle(
    region: &dyn LocalRegion,
    st: &mut State,
    stats: &mut ServerStats,
    key: &[u8],
    p: &Pending,
) -> Result<(), FabricError> {
    let sb = st.sb;
    let Some((idx, bucket)) = locate(region, st, key)? else {
        return Ok(());
    };
    let meta = bucket.meta();
    if meta.new_off() != p.units || bucket.head() != p.head {
        return Ok(());
    }
    let off = sb.bucket_off(idx);
    let slot = sb
        .object_off(p.head, p.units)
        .map_err(|_| corrupt(region, off))?;
    let mut obj = vec![0u8; remora_layouts::erda::OBJECT_MAX];
    let (whole, deleted, len) =
        ErdaServer::check_object(region, &sb, p.head, p.units, key, &mut obj);
    let (new_meta, live) = if whole {
        stats.revoked_adopted += 1;
        match clean::reserve(region, st, stats, p.head, len, false)? {
            Space::At(units) => {
                let copy = sb
                    .object_off(p.head, units)
                    .map_err(|_| corrupt(region, off))?;
                region.write(copy, &obj[..len as usize])?;
                region.persist(copy, len as usize);
                let m = meta
                    .revert()
                    .advance(units)
                    .map_err(|_| corrupt(region, off))?;
                (m, !deleted)
            }
            Space::Full | Space::Preparing => {
                // No room for a copy: flush the original in place (a CPU flush reaches the
                // NIC-written lines too on hardware) and keep the word.
                region.persist(slot, len as usize);
                (meta, !deleted)
            }
        }
    } else {
        stats.revoked_reverted += 1;
        let n = (p.len as usize + DURABLE_MARK_LEN).min(sb.head_remaining(p.units) as usize);
        let zero = [0u8; 256];
        let mut done = 0;
        while done < n {
            let k = (n - done).min(zero.len());
            region.write(slot + done as u64, &zero[..k])?;
            done += k;
        }
        region.persist(slot, n);
        let old = ErdaServer::check_object(region, &sb, p.head, meta.old_off(), key, &mut obj);
        (meta.revert(), old.0 && !old.1)
    };
    region.store_u64(off, new_meta.encode())?;
    region.persist(off, 8);
    stats.persists += 3;
    if let Some(b) = st.present.get_mut(idx as usize) {
        *b = live;
    }
    Ok(())
}
