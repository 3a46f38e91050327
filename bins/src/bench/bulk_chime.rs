//! CHIME's LOAD phase by bulk loading (`remora::core::chime` `Chime::bulk_load`), where the
//! load is not what is measured: as SMART's and Sherman's (`bulk.rs`), by one client through
//! the fabric, before the other clients open the tree; then one client per compute-node
//! state warms its index cache (`Chime::warm_cache`, Sherman's warm-up: the level-1 pages and
//! those above, as far as the cache's budget goes; the hotspot cache stays empty, as
//! inserts leave it). The keys and values are exactly those the LOAD phase would insert.
//!
//! The tree is the shape the authors' load leaves (they insert random keys,
//! `test/ycsb_test.cpp`): leaves [`INSERT_FILL_PERCENT`] full, internal pages
//! [`INTERNAL_FILL_PERCENT`] (ln 2); with hopscotch leaves off (the Sherman of CHIME's
//! experiment), Sherman's pages at the leaf fill random inserts leave them, ln 2 too.
use super::BenchArgs;
use super::bulk::BulkKey;
use super::phase::value_for;
use remora::core::chime::{Chime, INSERT_FILL_PERCENT, INTERNAL_FILL_PERCENT};
use remora::core::fabric::Endpoint;

/// The leaf fill of `c`'s bulk load: what random inserts leave ([`INSERT_FILL_PERCENT`] of
/// a hopscotch leaf; Sherman's leaves, with hopscotch off, ln 2 as its internal pages).
pub fn leaf_fill<E: Endpoint>(c: &Chime<'_, E>) -> u8 {
    if c.config().hopscotch {
        INSERT_FILL_PERCENT
    } else {
        INTERNAL_FILL_PERCENT
    }
}

/// Bulk-loads `keys` (sorted) into `c`, just created; a one-line summary.
pub async fn load<E: Endpoint>(
    c: &Chime<'_, E>,
    a: &BenchArgs,
    keys: &[BulkKey],
) -> Result<String, String> {
    let size = a.value_size;
    let mut entry = |i: u64, out: &mut [u8]| {
        let k = &keys[i as usize];
        value_for(k.n, size, out);
        (k.key, size)
    };
    let hop = c.config().hopscotch;
    let leaf_fill = leaf_fill(c);
    let st = c
        .bulk_load(
            keys.len() as u64,
            leaf_fill,
            INTERNAL_FILL_PERCENT,
            &mut entry,
        )
        .await
        .map_err(|e| e.to_string())?;
    let t = st.tree;
    Ok(format!(
        "CHIME image of {} keys ({} leaves {leaf_fill}% full, {:.1} keys a leaf{}), internal pages \
         {INTERNAL_FILL_PERCENT}% full: {} leaves, {} internal pages, height {}, {} MiB in {} \
         chunks",
        t.keys,
        if hop { "hopscotch" } else { "Sherman" },
        t.keys as f64 / t.leaves.max(1) as f64,
        if hop {
            format!(
                "; {} entries off their home slot, {} leaves closed by a key with no room",
                st.displaced, st.no_room
            )
        } else {
            String::new()
        },
        t.leaves,
        t.internal_pages,
        t.height + 1,
        t.bytes >> 20,
        t.chunks
    ))
}
