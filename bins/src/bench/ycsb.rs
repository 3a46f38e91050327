//! YCSB workloads and key generators (the core workloads A-E and LOAD, as YCSB defines them).
//!
//! - Keys are numbered; key `n` is `fnvhash64(n)` (YCSB's hashed, unordered inserts): as a
//!   big-endian 8-byte integer, or the string `"user" + decimal`.
//! - Request distributions: uniform, scrambled zipfian (YCSB's: a zipfian over
//!   10^10 items hashed into the key space; with θ = 0.99 YCSB's precomputed ζ(10^10) is
//!   used, for other θ the zipfian runs over the record count, since ζ(10^10, θ) would take
//!   minutes to compute), and latest (zipfian over the keys inserted so far, newest first).
use clap::ValueEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// 100% insert of the record set.
    Load,
    /// 50% read, 50% update.
    A,
    /// 95% read, 5% update.
    B,
    /// 100% read.
    C,
    /// 95% read (latest), 5% insert.
    D,
    /// 95% short scan, 5% insert.
    E,
    /// 100% update (the Erda paper's update-only and the CANRT paper's write-only workload;
    /// `--workload update-only`, `u` or `w`).
    #[value(name = "update-only", alias = "u", alias = "w")]
    U,
    /// 100% range queries of exactly `--scan-max` keys (the CANRT paper's range query).
    Range,
    /// 50% insert of new keys, 50% read of existing keys (zipfian unless `--distribution`
    /// says otherwise): the Sherman paper's write-intensive workload (seeds/002 §3: "In
    /// write-intensive workloads (50% insert and 50% lookup)", under "skewed workloads (0.99
    /// Zipfian parameter)"); `--workload write-intensive` or `wi`.
    #[value(name = "write-intensive", alias = "wi")]
    Wi,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Load => "LOAD",
            Workload::A => "A",
            Workload::B => "B",
            Workload::C => "C",
            Workload::D => "D",
            Workload::E => "E",
            Workload::U => "UPD",
            Workload::Range => "RANGE",
            Workload::Wi => "WI",
        }
    }
    /// Percentages of (read, update, insert, scan).
    pub fn mix(self) -> [u32; 4] {
        match self {
            Workload::Load => [0, 0, 100, 0],
            Workload::A => [50, 50, 0, 0],
            Workload::B => [95, 5, 0, 0],
            Workload::C => [100, 0, 0, 0],
            Workload::D => [95, 0, 5, 0],
            Workload::E => [0, 0, 5, 95],
            Workload::U => [0, 100, 0, 0],
            Workload::Range => [0, 0, 0, 100],
            Workload::Wi => [50, 0, 50, 0],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Distribution {
    Uniform,
    Zipfian,
    Latest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KeyType {
    /// 8-byte integers (big-endian).
    Int,
    /// "user" + decimal digits (variable length); for CANRT, WORT and WOART random strings
    /// of exactly 16 bytes (the CANRT paper's keys: `string_key16`).
    String,
    /// 8-byte integers in insertion order: key n is n (big-endian), so LOAD inserts
    /// sequential keys (the CANRT paper's sequential workloads).
    Seq,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Update,
    Insert,
    Scan,
}

/// YCSB's 64-bit FNV hash of a key number.
pub fn fnvhash64(mut val: u64) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for _ in 0..8 {
        h ^= val & 0xff;
        h = h.wrapping_mul(1_099_511_628_211);
        val >>= 8;
    }
    // Java's Math.abs on a long.
    (h as i64).wrapping_abs() as u64
}

/// Writes key number `n` into `out`; returns its length.
pub fn key_of(kind: KeyType, n: u64, out: &mut [u8; 32]) -> usize {
    let h = fnvhash64(n);
    match kind {
        KeyType::Seq => {
            out[..8].copy_from_slice(&n.to_be_bytes());
            8
        }
        KeyType::Int => {
            out[..8].copy_from_slice(&h.to_be_bytes());
            8
        }
        KeyType::String => {
            out[..4].copy_from_slice(b"user");
            let mut digits = [0u8; 20];
            let mut v = h;
            let mut d = 0;
            loop {
                digits[d] = b'0' + (v % 10) as u8;
                d += 1;
                v /= 10;
                if v == 0 {
                    break;
                }
            }
            for i in 0..d {
                out[4 + i] = digits[d - 1 - i];
            }
            4 + d
        }
    }
}

/// Key number `n` of at most `max` bytes: a string key longer than that ("user" and up to
/// 19 decimal digits of the hash) is written as "user" and the hash in base 62 instead (at
/// most 15 bytes): the same keys, one to one (no truncation, no collision), for stores with
/// short inline keys (Erda's buckets hold 16 bytes).
pub fn key_of_within(kind: KeyType, n: u64, out: &mut [u8; 32], max: usize) -> usize {
    let len = key_of(kind, n, out);
    if len <= max || kind != KeyType::String {
        return len;
    }
    const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut v = fnvhash64(n);
    let mut d = 0;
    let mut digits = [0u8; 11];
    loop {
        digits[d] = DIGITS[(v % 62) as usize];
        d += 1;
        v /= 62;
        if v == 0 {
            break;
        }
    }
    for i in 0..d {
        out[4 + i] = digits[d - 1 - i];
    }
    4 + d
}

/// String key number `n` of exactly 16 bytes, as the CANRT paper's random string keys: 16
/// letters and digits, the last 11 the hash of `n` in base 62 (so distinct key numbers give
/// distinct keys, as with `key_of`), the first 5 from a second hash (so no byte position is
/// constant across keys).
pub fn string_key16(n: u64, out: &mut [u8; 32]) -> usize {
    const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut v = fnvhash64(n);
    for i in (5..16).rev() {
        out[i] = DIGITS[(v % 62) as usize];
        v /= 62;
    }
    let mut w = fnvhash64(n ^ 0x5DEE_CE66_D1CE_4E5B);
    for i in (0..5).rev() {
        out[i] = DIGITS[(w % 62) as usize];
        w /= 62;
    }
    16
}

/// xorshift64*: the driver's uniform source (one per coroutine).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }
}

fn zeta(from: u64, to: u64, theta: f64, start: f64) -> f64 {
    let mut s = start;
    for i in from..to {
        s += 1.0 / ((i + 1) as f64).powf(theta);
    }
    s
}

/// ζ(n, θ) = Σ_{i=1..n} i^-θ: summed exactly up to 2^12 terms, the rest by Euler–Maclaurin
/// (the integral, the half end terms and the first derivative term; the next term is below
/// 1e-15 past 2^12), so ζ(10^9) costs microseconds instead of a minute, once per client
/// thread and phase; within 1e-9 of the exact sum (YCSB's ζ(10^10, 0.99) is checked in the
/// tests).
pub fn zeta_of(n: u64, theta: f64) -> f64 {
    const EXACT: u64 = 1 << 12;
    if n <= EXACT {
        return zeta(0, n, theta, 0.0);
    }
    let m = EXACT as f64;
    let x = n as f64;
    let f = |v: f64| v.powf(-theta);
    let df = |v: f64| -theta * v.powf(-theta - 1.0);
    let integral = (x.powf(1.0 - theta) - m.powf(1.0 - theta)) / (1.0 - theta);
    zeta(0, EXACT, theta, 0.0) + integral + (f(x) - f(m)) / 2.0 + (df(x) - df(m)) / 12.0
}

/// Gray et al.'s zipfian generator over `items` items, as YCSB implements it (the item
/// count may grow: ζ is extended incrementally).
#[derive(Debug, Clone)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    zeta2: f64,
    eta: f64,
}

impl Zipfian {
    pub fn new(items: u64, theta: f64) -> Zipfian {
        Self::with_zeta(items, theta, zeta(0, items, theta, 0.0))
    }
    pub fn with_zeta(items: u64, theta: f64, zetan: f64) -> Zipfian {
        let zeta2 = zeta(0, 2, theta, 0.0);
        let mut z = Zipfian {
            items,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            zeta2,
            eta: 0.0,
        };
        z.eta = z.compute_eta();
        z
    }
    fn compute_eta(&self) -> f64 {
        (1.0 - (2.0 / self.items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
    }
    /// Grows the item count (for "latest").
    pub fn grow_to(&mut self, items: u64) {
        if items > self.items {
            self.zetan = zeta(self.items, items, self.theta, self.zetan);
            self.items = items;
            self.eta = self.compute_eta();
        }
    }
    /// A rank in [0, items): 0 is the most popular.
    pub fn next(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.items - 1);
        }
        let v = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        v.min(self.items - 1)
    }
}

/// YCSB's ζ(10^10, 0.99).
const YCSB_ITEM_COUNT: u64 = 10_000_000_000;
const YCSB_ZETAN_099: f64 = 26.469_028_201_783_02;

/// Picks key numbers for requests.
pub enum KeyChooser {
    Uniform,
    /// Scrambled zipfian: rank hashed into [0, records).
    Scrambled(Zipfian),
    /// Latest: newest key minus a zipfian rank.
    Latest(Zipfian),
}

impl KeyChooser {
    /// YCSB's chooser (the tests' and the calibration's; runs use [`KeyChooser::over`]).
    #[cfg(test)]
    pub fn new(d: Distribution, records: u64, theta: f64) -> KeyChooser {
        Self::over(d, records, theta, None)
    }

    /// YCSB's chooser; a zipfian's ranks run over `items` (`--zipf-items`) when given.
    pub fn over(d: Distribution, records: u64, theta: f64, items: Option<u64>) -> KeyChooser {
        match d {
            Distribution::Uniform => KeyChooser::Uniform,
            Distribution::Zipfian if items.is_some() => {
                let n = items.unwrap_or(2).max(2);
                KeyChooser::Scrambled(Zipfian::with_zeta(n, theta, zeta_of(n, theta)))
            }
            Distribution::Zipfian => {
                if (theta - 0.99).abs() < 1e-12 {
                    KeyChooser::Scrambled(Zipfian::with_zeta(
                        YCSB_ITEM_COUNT,
                        theta,
                        YCSB_ZETAN_099,
                    ))
                } else {
                    KeyChooser::Scrambled(Zipfian::new(records.max(2), theta))
                }
            }
            Distribution::Latest => KeyChooser::Latest(Zipfian::new(records.max(2), theta)),
        }
    }

    /// A key number among the `existing` keys inserted so far.
    pub fn next(&mut self, rng: &mut Rng, existing: u64) -> u64 {
        let existing = existing.max(1);
        match self {
            KeyChooser::Uniform => rng.below(existing),
            KeyChooser::Scrambled(z) => fnvhash64(z.next(rng)) % existing,
            KeyChooser::Latest(z) => {
                z.grow_to(existing);
                existing - 1 - z.next(rng).min(existing - 1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeta_of_large_counts_matches_ycsb_and_the_exact_sum() {
        assert!((zeta_of(YCSB_ITEM_COUNT, 0.99) - YCSB_ZETAN_099).abs() < 1e-9);
        let n = (1 << 12) + 1_234_567;
        assert!((zeta_of(n, 0.9) - zeta(0, n, 0.9, 0.0)).abs() < 1e-9);
        assert_eq!(zeta_of(1000, 0.99), zeta(0, 1000, 0.99, 0.0));
    }

    #[test]
    fn fewer_zipf_items_make_the_hottest_key_hotter() {
        let share = |items: Option<u64>| {
            let mut c = KeyChooser::over(Distribution::Zipfian, 10_000, 0.99, items);
            let mut r = Rng::new(3);
            let mut hist = vec![0u32; 10_000];
            for _ in 0..200_000 {
                hist[c.next(&mut r, 10_000) as usize] += 1;
            }
            *hist.iter().max().unwrap() as f64 / 200_000.0
        };
        // 1/ζ: 3.8% over 10^10 items, 4.9% over 2^26, 9.8% over the 10k keys themselves.
        let (ycsb, authors, own) = (share(None), share(Some(1 << 26)), share(Some(10_000)));
        assert!((0.034..0.042).contains(&ycsb), "{ycsb}");
        assert!((0.045..0.054).contains(&authors), "{authors}");
        assert!((0.09..0.106).contains(&own), "{own}");
    }

    #[test]
    fn zipfian_is_skewed_and_in_range() {
        let z = Zipfian::new(1000, 0.99);
        let mut r = Rng::new(1);
        let mut hist = vec![0u32; 1000];
        for _ in 0..100_000 {
            hist[z.next(&mut r) as usize] += 1;
        }
        assert!(hist[0] > hist[10] && hist[10] > hist[500]);
        assert!(hist[0] > 10_000, "rank 0 drew {}", hist[0]);
        let mut c = KeyChooser::new(Distribution::Zipfian, 1000, 0.99);
        let mut l = KeyChooser::new(Distribution::Latest, 1000, 0.99);
        for _ in 0..10_000 {
            assert!(c.next(&mut r, 1000) < 1000);
            assert!(l.next(&mut r, 1500) < 1500);
        }
    }

    #[test]
    fn keys() {
        let mut b = [0u8; 32];
        let n = key_of(KeyType::String, 7, &mut b);
        assert!(b[..n].starts_with(b"user") && n > 5 && !b[..n].contains(&0));
        assert_eq!(key_of(KeyType::Int, 7, &mut b), 8);
        assert_ne!(fnvhash64(1), fnvhash64(2));
        // Short string keys: one to one, at most 15 bytes, long ones recoded.
        let mut seen = std::collections::HashSet::new();
        for n in 0..20_000 {
            let l = key_of_within(KeyType::String, n, &mut b, 16);
            assert!(l <= 15 && b[..l].starts_with(b"user"));
            assert!(seen.insert(b[..l].to_vec()), "key {n} collides");
        }
        assert_eq!(key_of_within(KeyType::Int, 7, &mut b, 16), 8);
        // The CANRT paper's keys: 16 letters and digits, one to one, no constant byte.
        let mut seen = std::collections::HashSet::new();
        let mut firsts = std::collections::HashSet::new();
        for n in 0..20_000 {
            assert_eq!(string_key16(n, &mut b), 16);
            assert!(b[..16].iter().all(u8::is_ascii_alphanumeric));
            assert!(seen.insert(b[..16].to_vec()), "key {n} collides");
            firsts.insert(b[0]);
        }
        assert!(firsts.len() > 50, "first bytes: {firsts:?}");
        assert_eq!(Workload::A.mix().iter().sum::<u32>(), 100);
        // Sequential keys: key n is n, big-endian, so insertion order is key order.
        assert_eq!(key_of(KeyType::Seq, 258, &mut b), 8);
        assert_eq!(b[..8], 258u64.to_be_bytes());
        assert_eq!(Workload::U.mix(), [0, 100, 0, 0]);
        assert_eq!(Workload::Range.mix(), [0, 0, 0, 100]);
        assert_eq!(Workload::Wi.mix(), [50, 0, 50, 0]);
        assert_eq!(
            Workload::from_str("wi", true),
            Ok(Workload::Wi),
            "the short name parses"
        );
    }
}
