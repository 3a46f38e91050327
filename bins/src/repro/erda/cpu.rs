//! The notes of Erda's CPU-cost rows (seeds/004 §5.4, Figs. 22-25): what the paper measures,
//! the run that measures it as the paper did (`erda-cpu`), and the figures.

/// What the paper's CPU rows measure (seeds/004 §5.4), shared by the notes of the CPU rows:
/// `top`'s CPU utilisation of the server process, normalised to Erda's, per workload and
/// value size (Figs. 22-25: 16, 64, 256 and 1024 B); the text's ratios are averages over the
/// four figures, not Fig. 25's 1 KiB bars. The value-size runs use one client thread
/// (`CPU_CLIENTS`), whose sleeps before each operation (`CPU_PACE_BASELINE`) leave the
/// server lightly loaded. Each system ran the same YCSB files (the same operations), so the
/// server's CPU time over a run (`top`'s TIME+) compares as CPU per operation; a `%CPU`
/// ratio would also carry the ratio of the runs' durations.
macro_rules! cpu_def {
    () => {
        "the paper's CPU cost is `top`'s utilisation of the server process \
     normalised to Erda's (§5.4), averaged over its four value-size figures (16, 64, 256, \
     1 KiB: Figs. 22-25), measured with its clients sleeping before each operation; remora \
     measures server CPU per op (all server threads) in the erda-cpu table, with one client \
     thread as the authors' value-size clients (client.c, Client.c, *_latency.c: one \
     thread each; only the *_tput.c clients start more), paced as theirs (usleep(500) \
     before each write, the baselines' usleep(100) before each read, each up to 50 µs \
     longer: --think-slack-us)"
    };
}

/// Why a lightly loaded server's CPU per request is dominated by its wakes.
macro_rules! cpu_wake {
    () => {
        "the authors' servers block in ibv_get_cq_event between completions and \
     signal every reply on the same CQ (poll_cq, send_msg, write_with_imm in each server.c), \
     so an idle server wakes twice per request: the profile's server_wake_cpu_ns (4.4 µs: \
     2.2 µs measured per blocking wake on this host by `cargo test --release -p \
     remora-poller --test erda_wake -- --nocapture`, x 2 for the Westmere core) charges each \
     wake, 8.8 µs a request, the same in the three systems; the paper's update-only averages \
     imply 8.5-11 µs per request common to the three beyond their persists (Redo flushes 17 \
     lines twice per 1 KiB update, RAW once, Erda never), a cross-check of that value, not a \
     confirmation"
    };
}

/// The note of the update-only Redo / Erda CPU row.
pub(super) const CPU_UPD_REDO: &str = concat!(
    cpu_def!(),
    "; ",
    cpu_wake!(),
    ". At 1 KiB, one paced client: Erda 9.44 µs per update (0.64 of service, the rest two \
     wakes), Redo 14.85 (its two 17-line persists on top): 1.57x, beside the paper's model \
     at 1 KiB of 1 + 5.10 / 11.0 = 1.46x (its 1 KiB bar is not in its text); at 16 paced \
     client threads 6.91 / 11.81 µs, 1.71x. Closed loop (erda-values: the server 100 % busy, \
     so it never sleeps): Redo 6.05 / Erda 0.64 µs, 9.40x"
);

/// The note of the update-only RAW / Erda CPU row.
pub(super) const CPU_UPD_RAW: &str = "measured as the Redo update-only CPU row says (the \
     paper's measure; each wake of the authors' blocking server charged, 8.8 µs per idle \
     request): at 1 KiB, one paced client, RAW 12.07 µs per update (its apply's 17-line \
     persist on the background thread, as the authors' rbflush pthread) against Erda's 9.44: \
     1.28x (the paper's model at 1 KiB: 1 + 2.55 / 8.5 = 1.30x); closed loop (erda-values, no \
     wakes) it was 3.25 / 0.64 µs, 5.05x";

/// The note of the YCSB-A RAW / Erda CPU row.
pub(super) const CPU_A_RAW: &str = "measured as the Redo update-only CPU row says: at 1 KiB, \
     one paced client, RAW 10.71 µs per op (each read and write wakes the server; every \
     write adds its apply) against Erda's 4.70 (its writes only, half the ops: Erda's reads \
     never reach the server): 2.28x beside the paper's 1.96x; closed loop (erda-values, no \
     wakes) it was 1.88 / 0.32 µs, 5.86x";

/// The note of the YCSB-B CPU rows (Redo at 64 B, RAW at 1 KiB).
pub(super) const CPU_B: &str = "measured as the Redo update-only CPU row says: an idle \
     request costs its server 8.8 µs of wakes in each system, so with one paced client every \
     Redo and RAW read pays them and only Erda's writes do (95 % of Redo's operations reach \
     its server, 5 % of Erda's: 1 / 0.05 = 20, the paper's 20.09x / 20.81x). Redo 9.29 / \
     Erda 0.47 µs per op at 64 B (19.8x), RAW 9.49 / 0.47 at 1 KiB (20.1x); over the \
     paper's four sizes (16, 64, 256, 1024 B; `--value-size`) Redo / Erda 19.7-20.4x, RAW / \
     Erda 19.7-20.1x. The client count is what moves it: at 16 paced client threads (the \
     rows' earlier setup) the baselines' reads, one per ~125 µs per thread, often find the \
     thread still awake from the request before (a wake keeps it up 7.4 µs, its reply's \
     completion another 7.4) and Redo spends 4.14 µs per op, 11.5x (RAW 11.6x); closed loop \
     (erda-values, the baselines' server 100 % busy, never asleep) Redo 14.97x, RAW 19.24x";
