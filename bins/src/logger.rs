//! The command's logger: the libraries' `log` records, info and above, to stderr as the
//! libraries used to print them (`REMORA_LOG=debug` for more, `off` for none).
struct Stderr;

impl log::Log for Stderr {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            eprintln!("{}", r.args());
        }
    }
    fn flush(&self) {}
}

static LOGGER: Stderr = Stderr;

/// Installs the logger (once, at start).
pub fn init() {
    let level = std::env::var("REMORA_LOG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(log::LevelFilter::Info);
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}
