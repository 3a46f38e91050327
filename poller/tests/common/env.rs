//! Test knobs read from the environment.
//!
//! Included by the tests that use it (`#[path = "common/env.rs"] mod env;`).

/// The number in environment variable `var` (seeds, trials), else `default`.
pub fn env_count(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
