//! The linearizability driver on a toy index over a `BTreeMap`, correct and with bugs.
use super::*;

/// A toy index over a `BTreeMap`, each operation yielding before and after it takes effect
/// (so clients overlap), with optional bugs.
struct Toy {
    map: core::cell::RefCell<BTreeMap<u64, u64>>,
    /// Previous value of each key (for the stale-read bug).
    prev: core::cell::RefCell<BTreeMap<u64, u64>>,
    bug: Option<&'static str>,
    n: core::cell::Cell<u64>,
}

impl Toy {
    fn new(bug: Option<&'static str>) -> Toy {
        Toy {
            map: Default::default(),
            prev: Default::default(),
            bug,
            n: Default::default(),
        }
    }
    async fn pause(&self) {
        self.n.set(self.n.get() + 1);
        for _ in 0..(self.n.get() * 7919) % 3 {
            crate::block_on::yield_now().await;
        }
    }
    fn key(k: &[u8]) -> u64 {
        u64::from_be_bytes(k.try_into().unwrap())
    }
    fn tag_of(v: &[u8]) -> u64 {
        u64::from_le_bytes(v[..8].try_into().unwrap())
    }
    fn set(&self, k: u64, v: u64) {
        if let Some(old) = self.map.borrow_mut().insert(k, v) {
            self.prev.borrow_mut().insert(k, old);
        }
    }
}

impl crate::index::KvIndex for Toy {
    type Error = &'static str;
    async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), &'static str> {
        self.pause().await;
        self.set(Self::key(key), Self::tag_of(value));
        self.pause().await;
        Ok(())
    }
    async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, &'static str> {
        self.pause().await;
        let k = Self::key(key);
        let present = self.map.borrow().contains_key(&k);
        if present {
            self.set(k, Self::tag_of(value));
        }
        self.pause().await;
        Ok(present)
    }
    async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, &'static str> {
        self.pause().await;
        let k = Self::key(key);
        let mut v = self.map.borrow().get(&k).copied();
        if self.bug == Some("stale") && self.n.get().is_multiple_of(5) {
            v = self.prev.borrow().get(&k).copied().or(v);
        }
        self.pause().await;
        Ok(v.map(|v| {
            out[..8].copy_from_slice(&v.to_le_bytes());
            8
        }))
    }
    async fn delete(&self, key: &[u8]) -> Result<bool, &'static str> {
        self.pause().await;
        let k = Self::key(key);
        let keep = self.bug == Some("lost delete") && self.n.get().is_multiple_of(3);
        let present = if keep {
            self.map.borrow().contains_key(&k)
        } else {
            self.map.borrow_mut().remove(&k).is_some()
        };
        self.pause().await;
        Ok(present)
    }
    async fn scan(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, &'static str> {
        self.pause().await;
        let skip = self.bug == Some("scan skips");
        let items: Vec<(u64, u64)> = self
            .map
            .borrow()
            .range(Self::key(from)..)
            .skip(usize::from(skip && self.n.get().is_multiple_of(2)))
            .take(limit)
            .map(|(k, v)| (*k, *v))
            .collect();
        self.pause().await;
        for (k, v) in &items {
            visit(&k.to_be_bytes(), &v.to_le_bytes());
        }
        Ok(items.len())
    }
}

/// Runs `clients` drivers concurrently on `toy` (round robin on one thread).
fn drive(toy: &Toy, clients: u32, ops: u64, err_after: Option<u64>) -> History {
    use core::future::Future;
    use core::task::{Context, Poll, Waker};
    let rec = Recorder::new(clients as usize * ops as usize, 1 << 16);
    let t = core::cell::Cell::new(0u64);
    let clock = || {
        t.set(t.get() + 1);
        t.get()
    };
    let specs: Vec<driver::LinSpec> = (1..=clients)
        .map(|c| driver::LinSpec {
            cold: 8,
            ..driver::LinSpec::new(c, ops, 5, true)
        })
        .collect();
    let mut futs: Vec<_> = specs
        .iter()
        .map(|s| std::boxed::Box::pin(driver::lin_client(toy, s, &rec, &clock)))
        .collect();
    let mut done = std::vec![false; futs.len()];
    let mut cx = Context::from_waker(Waker::noop());
    let mut steps = 0u64;
    while done.iter().any(|d| !d) {
        for (i, f) in futs.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            steps += 1;
            if err_after.is_some_and(|n| steps > n) && i == 0 {
                // Client 1 "crashes": its in-flight operation never completes.
                done[i] = true;
                continue;
            }
            if let Poll::Ready(r) = f.as_mut().poll(&mut cx) {
                r.unwrap();
                done[i] = true;
            }
        }
    }
    drop(futs);
    rec.finish().unwrap()
}

#[test]
fn driver_histories_on_a_correct_toy_index_pass() {
    let toy = Toy::new(None);
    let h = drive(&toy, 8, 300, None);
    let r = check(&h, &CheckConfig::new(5));
    assert!(r.is_ok(), "{r}");
    assert!(r.scans > 20 && r.keys > 10, "{r}");
    // A client that dies mid-operation leaves it pending; still linearizable.
    let toy = Toy::new(None);
    let h = drive(&toy, 8, 300, Some(500));
    assert!(h.events.iter().any(|e| e.ret == PENDING));
    let r = check(&h, &CheckConfig::new(5));
    assert!(r.is_ok(), "{r}");
}

#[test]
fn driver_histories_on_buggy_toy_indexes_fail() {
    for bug in ["stale", "lost delete", "scan skips"] {
        let toy = Toy::new(Some(bug));
        let h = drive(&toy, 8, 300, None);
        let r = check(&h, &CheckConfig::new(5));
        println!("{bug}: {r}");
        assert!(!r.violations.is_empty(), "{bug} not caught");
    }
}
