//! What the decoder fuzzers share: a seeded xorshift generator and the round count.

/// A deterministic xorshift64 generator (no external crate, same sequence everywhere).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform-ish in `0..n` (`0` for `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Rounds per decoder: `REMORA_FUZZ_ROUNDS`, default 20,000 (what CI runs).
pub fn rounds() -> u64 {
    std::env::var("REMORA_FUZZ_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000)
}
