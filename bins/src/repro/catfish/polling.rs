//! Polling vs event-based fast messaging (seeds/003 §4.2, Fig. 6(a)): the server CPU
//! saturated by R-tree searches at scale 0.00001, 80 and 320 clients. The paper's polling
//! server runs a thread per connection that busy-polls its ring buffer; with more
//! connections than its 28 cores "a thread that is not scheduled by OS is delayed in
//! polling, even if its request has arrived; and other scheduled threads may be wasting the
//! CPU cycles if there are no incoming requests in their connections" (§4.2), and its mean
//! latency grows 18.2x from 80 to 320 clients ("quadratically"), the event-based server's
//! 4.46x. This is not the §5 fast messaging baseline's cost (see [`POLL_OVERSUB_NS`]).
use super::{Ctx, EVENT_HANDLER_NS, NODES, curve_rects, llc_lines};
use crate::repro::{Chart, Claim, Experiment, Metric, Pick, Series};

/// Fig. 6(a)'s client counts (§4.2: "the number of clients varies from 80 to 320").
const FIG6_CLIENTS: [usize; 2] = [80, 320];
/// Fig. 6(a)'s mean search latencies at scale 0.00001, µs (§4.2's text): polling at 80 and
/// 320 clients, event-based at 80 and 320.
const POLL_80: f64 = 203.96;
const POLL_320: f64 = 3712.35;
const EVENT_80: f64 = 152.50;
const EVENT_320: f64 = 680.47;

/// The polling server's extra CPU a message per (connections per server thread)^2, in ns of
/// the sim's per-request scale: the `--poll-oversub-ns` of the polling series below.
///
/// The form. The sim has no OS scheduler to oversubscribe; what it can charge is CPU a
/// message that grows with the connections per server thread (`server_scan_ns` x share,
/// share = connections / `server_threads` rounded up: `poller/src/sim/server.rs`). At
/// saturation a closed loop of N clients (one request outstanding each) on C = 28 cores has
/// mean latency L ≈ N x S / C, so the CPU a request is S(N) = L x C / N:
/// - polling: S(80) = 203.96 x 28 / 80 = 71.39 µs, S(320) = 3712.35 x 28 / 320 = 324.83 µs;
/// - event-based: S(80) = 152.50 x 28 / 80 = 53.38 µs, S(320) = 680.47 x 28 / 320 = 59.54 µs.
///
/// The existing per-connection ring scan (S = a + k x share, share = 3 at 80 clients and 12
/// at 320) fits the polling pair only with k = (324.83 - 71.39) / 9 = 28.16 µs a ring and a
/// = 71.39 - 3 x 28.16 = -13.1 µs: a negative fixed cost, and a "scan" of 28 µs where
/// checking a ring is a cache line. So the paper's mechanism is not a ring scan but thread
/// oversubscription, whose excess over the event-based server, W = S_poll - S_event, grows
/// with the square of the share: W(80) = 18.01 µs, W(320) = 265.29 µs, 14.7x for 4x the
/// clients (exponent 1.94; the paper: latency "increases quadratically"). W = K x share^2
/// gives K = 18.01 / 9 = 2.001 µs (80 clients) and 265.29 / 144 = 1.842 µs (320); their
/// geometric mean, K = 1.920 µs, is within 4% of each. (Charged as `server_scan_ns` = K x
/// share, by `--poll-oversub-ns`, since the sim charges the scan x share.)
///
/// The scale. The sim's per-request CPU is §5's (fast messaging 48.65 µs, Catfish's
/// event-based server 36.376 µs: [`EVENT_HANDLER_NS`]); Fig. 6's servers take 1.467x that
/// (53.375 / 36.376: its event-based S(80)). In the sim's scale K = 1,920 x 36.376 / 53.375
/// = 1,309 ns, and the polling server costs 36,376 + 1,309 x share^2 ns a message: 48,157 ns
/// at 80 clients (the profile's 48,650, §5's fast messaging, 1.0% below), 224,872 ns at 320.
///
/// Why the §5 fast messaging baseline does not carry it: the paper's own §5 figures show no
/// such fall. Its fast messaging at 256 clients answers in 299.10 µs (Fig. 12(a), §5.2.1)
/// at about 534 Kops (Catfish's 1,239.35 Kops / its "up to 2.32x"), 93% of its 575.53 Kops
/// peak; this cost at 256 clients (share 10) would make it 167,276 ns a request, 167 Kops
/// on 28 threads and ~1,530 µs. Fig. 6's polling server (§4.2's motivation, on §1's setup)
/// is another server than the FaRM fast messaging of §5.
pub(super) const POLL_OVERSUB_NS: u64 = 1_309;

/// The two series' labels.
const POLLING: &str = "polling (thread per connection)";
const EVENT: &str = "event-based";
/// The experiment's id.
const ID: &str = "catfish-polling";
/// Where the paper's figures are.
const SRC: &str = "seeds/003 §4.2, Fig. 6(a), scale 0.00001";

/// Client counts of the experiment: Fig. 6's 80 and 320 (8 compute nodes x 10 and 40);
/// tiny runs 8 and 32.
fn clients(c: &Ctx) -> [usize; 2] {
    match c.s.name {
        "tiny" => [NODES, 4 * NODES],
        _ => FIG6_CLIENTS,
    }
}

/// Fast messaging with the polling server and with the event-based one, on the curves'
/// R*-tree, search-only at scale 0.00001.
pub(super) fn experiment(c: &Ctx) -> Experiment {
    let [lo, hi] = clients(c);
    let args = format!(
        "{} --set server_llc_lines={} --records {} --sweep clients={lo},{hi} --tree rstar \
         --mode messaging --window 0.00001 --set server_handler_ns={EVENT_HANDLER_NS}",
        c.common,
        llc_lines(curve_rects(c.s)),
        curve_rects(c.s)
    );
    Experiment {
        id: ID.into(),
        title: "Catfish: polling vs event-based fast messaging, search-only, scale 0.00001 \
                (Fig. 6)"
            .into(),
        chart: Chart::Curve,
        series: vec![
            Series::new(
                POLLING,
                format!("{args} --poll-oversub-ns {POLL_OVERSUB_NS}"),
                &["c"],
            ),
            Series::new(EVENT, args, &["c"]),
        ],
    }
}

/// Why the rows of Fig. 6 are checks of the derivation, not confirmations.
const FIT_NOTE: &str = "the polling server's extra CPU (36.376 µs + 1.309 µs x (clients per \
    server thread)^2 a search) is derived from these very latencies (Fig. 6(a) at 80 and 320 \
    clients, closed loop at saturation: CPU a search = latency x 28 cores / clients; \
    `POLL_OVERSUB_NS` in repro/catfish/polling.rs), so this row checks the derivation, it \
    does not confirm it; the sim's per-search CPU is §5's, 0.68x Fig. 6's, so its absolute \
    latencies are ~0.68x the paper's. The §5 fast messaging rows do not carry this cost: \
    the paper's §5 fast messaging answers in 299.10 µs at 256 clients, not Fig. 6's ~2 ms";
/// The event-based growth is not fitted.
const EVENT_NOTE: &str = "the event-based server's cost is derived from Fig. 6 at 80 clients \
    only (48.65 µs x 152.50 / 203.96); its growth to 320 clients is the sim's own (a closed \
    loop at saturation: 4x the clients, 4x the latency), the paper's 4.46x slightly more";

/// The rows of Fig. 6.
pub(super) fn claims() -> Vec<Claim> {
    let [lo, hi] = FIG6_CLIENTS;
    vec![
        Claim::ratio(
            "polling-latency-growth",
            "polling fast messaging mean latency, 320 / 80 clients (Fig. 6(a): 3712.35 / \
             203.96 µs)",
            (POLL_320 / POLL_80, POLL_320 / POLL_80),
            Metric::Mean,
            false,
            Pick::at(ID, POLLING, "c", lo),
            Pick::at(ID, POLLING, "c", hi),
            FIT_NOTE,
        )
        .figures(Some(POLL_80), Some(POLL_320), SRC),
        Claim::ratio(
            "event-latency-growth",
            "event-based fast messaging mean latency, 320 / 80 clients (Fig. 6(a): 680.47 / \
             152.50 µs)",
            (EVENT_320 / EVENT_80, EVENT_320 / EVENT_80),
            Metric::Mean,
            false,
            Pick::at(ID, EVENT, "c", lo),
            Pick::at(ID, EVENT, "c", hi),
            EVENT_NOTE,
        )
        .figures(Some(EVENT_80), Some(EVENT_320), SRC),
        Claim::ratio(
            "polling-vs-event-latency",
            "polling / event-based fast messaging mean latency, 320 clients (Fig. 6(a): \
             3712.35 / 680.47 µs)",
            (POLL_320 / EVENT_320, POLL_320 / EVENT_320),
            Metric::Mean,
            false,
            Pick::at(ID, EVENT, "c", hi),
            Pick::at(ID, POLLING, "c", hi),
            FIT_NOTE,
        )
        .figures(Some(EVENT_320), Some(POLL_320), SRC),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cores of the paper's server (2 x 14-core Xeon E5-2680 v4, seeds/003 §5).
    const CORES: f64 = 28.0;

    /// The CPU a request of a saturated closed loop of `clients` with mean latency
    /// `latency_us` on the paper's 28 cores, µs.
    fn service_us(latency_us: f64, clients: usize) -> f64 {
        latency_us * CORES / clients as f64
    }

    /// Connections per server thread at `clients`, rounded up as the sim's server rounds it.
    fn share(clients: usize) -> f64 {
        clients.div_ceil(CORES as usize) as f64
    }

    /// [`POLL_OVERSUB_NS`] from Fig. 6's figures, as its doc derives it (ns, unrounded).
    fn derived_oversub_ns() -> f64 {
        let [lo, hi] = FIG6_CLIENTS;
        let excess = |poll: f64, event: f64, n: usize| {
            (service_us(poll, n) - service_us(event, n)) / (share(n) * share(n))
        };
        let k_us = (excess(POLL_80, EVENT_80, lo) * excess(POLL_320, EVENT_320, hi)).sqrt();
        let scale = EVENT_HANDLER_NS as f64 / 1e3 / service_us(EVENT_80, lo);
        k_us * scale * 1e3
    }

    /// The constant is what its doc derives from Fig. 6's latencies, and with it the
    /// polling server's CPU a search at 80 clients is the profile's fast messaging cost
    /// (48.65 µs, §5) within 2% (1.0% below).
    #[test]
    fn the_oversubscription_cost_is_fig6s() {
        let k = derived_oversub_ns();
        assert_eq!(k.round() as u64, POLL_OVERSUB_NS, "{k}");
        assert_eq!((share(80), share(256), share(320)), (3.0, 10.0, 12.0));
        let at80 = EVENT_HANDLER_NS as f64 + POLL_OVERSUB_NS as f64 * share(80).powi(2);
        assert!((at80 / 48_650.0 - 1.0).abs() < 0.02, "{at80}");
        // The fit's two points, each within 5% of the paper's excess (in Fig. 6's scale).
        for (n, poll, event) in [(80, POLL_80, EVENT_80), (320, POLL_320, EVENT_320)] {
            let paper = service_us(poll, n) - service_us(event, n);
            let fit = derived_oversub_ns() / 1e3 * service_us(EVENT_80, 80)
                / (EVENT_HANDLER_NS as f64 / 1e3)
                * share(n).powi(2);
            assert!((fit / paper - 1.0).abs() < 0.05, "{n}: {fit} vs {paper}");
        }
    }
}
