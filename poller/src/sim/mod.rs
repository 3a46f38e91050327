//! The deterministic simulated cluster fabric (issue 3).
