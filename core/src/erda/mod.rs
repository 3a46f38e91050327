//! Erda: zero-copy log-structured remote NVM key-value store (in progress).
