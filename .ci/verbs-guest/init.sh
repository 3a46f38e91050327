#!/bin/busybox sh
# PID 1 of the remora verbs guest (see run.sh): brings up Soft-RoCE (rdma_rxe) on dummy0,
# starts a verbs memory node, runs the fabric conformance suite, `remora perf` and small YCSB
# runs (`remora bench --fabric verbs`) against it from other processes, and reports on the
# serial console. The host greps the final "REMORA-GUEST: PASS" / "REMORA-GUEST: FAIL" line.
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /tmp
. /etc/remora-guest.conf

say() { echo "REMORA-GUEST: $*"; }
finish() {
    say "$1"
    sync
    poweroff -f
    sleep 10
}

# Errors a user sees: each must exit non-zero with one line naming what to check.
ERRORS_RC=0
expect_error() {
    name=$1
    want=$2
    shift 2
    out=$("$@" 2>&1)
    rc=$?
    lines=$(printf '%s\n' "$out" | wc -l)
    if [ "$rc" != 0 ] && [ "$lines" = 1 ] && printf '%s' "$out" | grep -q "$want"; then
        say "error ok: $name: $out"
    else
        say "error BAD: $name (exit $rc, $lines lines): $out"
        ERRORS_RC=1
    fi
}

say "booted: $(uname -r), $(nproc) cpus"
for m in $(cat /etc/remora-modules); do
    insmod "/lib/modules/remora/$m.ko" || finish "FAIL insmod $m"
done
ip link set lo up
ip link set dummy0 up || finish "FAIL no dummy0"
ip addr add "$GUEST_IP/24" dev dummy0
rdma link add rxe0 type rxe netdev dummy0 || finish "FAIL rdma link add rxe0"
state=""
for i in $(seq 1 50); do
    state=$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)
    case "$state" in *ACTIVE*) break ;; esac
    usleep 100000
done
case "$state" in *ACTIVE*) ;; *) finish "FAIL rxe0 port not ACTIVE ($state)" ;; esac
say "$(rdma link show rxe0/1)"
echo "$HUGEPAGES" > /proc/sys/vm/nr_hugepages
ulimit -l unlimited

remora memnode --fabric verbs --listen "$GUEST_IP:$PORT" $MEMNODE_ARGS > /tmp/memnode.log 2>&1 &
MEMNODE=$!
for i in $(seq 1 100); do
    grep -q listening /tmp/memnode.log && break
    kill -0 $MEMNODE 2>/dev/null || break
    usleep 100000
done
cat /tmp/memnode.log
grep -q listening /tmp/memnode.log || finish "FAIL memnode did not start"

timeout "$CHECK_TIMEOUT" remora check --fabric verbs --connect "$GUEST_IP:$PORT"
CHECK_RC=$?
say "conformance exit code $CHECK_RC"

PERF_RC=skipped
if [ -n "$PERF_ARGS" ]; then
    timeout "$PERF_TIMEOUT" remora perf --fabric verbs --connect "$GUEST_IP:$PORT" --quiet \
        --json /tmp/perf.json $PERF_ARGS
    PERF_RC=$?
    sed 's/^/REMORA-PERF: /' /tmp/perf.json 2>/dev/null
    say "perf exit code $PERF_RC"
fi

# Syscalls of a client's data path (informational, never fails the run): READs of 64 B for
# 0.5 s and for 2.5 s under `strace -c -f`; the difference is what 2 s of steady state
# costs. Soft-RoCE's provider rings its doorbell with a syscall; a hardware NIC does not.
if [ -x /usr/bin/strace ]; then
    for s in 0.5 2.5; do
        timeout 120 strace -c -f -o /tmp/strace.txt remora perf --fabric verbs \
            --connect "$GUEST_IP:$PORT" --quiet --verbs read --sizes 64 --seconds "$s" \
            --threads 1 --coroutines 4 > /tmp/strace-perf.out 2>&1
        grep -a "verbs data path" /tmp/strace-perf.out | sed "s/^/REMORA-STRACE $s s: /"
        sed "s/^/REMORA-STRACE $s s: /" /tmp/strace.txt 2>/dev/null | head -n 25
    done
fi

# YCSB over verbs: each "index:workload" of BENCH_RUNS loads BENCH_ARGS' records and runs;
# the table goes to the console. A run passes if it exits 0 and printed its run row. The
# one-sided indexes share the echo memory node; CANRT and Erda each get a fresh memory node
# running their server (`--service canrt|erda`).
BENCH_RC=skipped
if [ -n "$BENCH_ARGS" ]; then
    BENCH_RC=0
    for run in $BENCH_RUNS; do
        index=${run%%:*}
        workload=${run#*:}
        addr="$GUEST_IP:$PORT"
        SERVICE_NODE=""
        case "$index" in
        canrt | erda)
            # A fresh port for every service node: the previous one's port may not be free
            # again yet right after it was killed.
            addr="$GUEST_IP:$SERVICE_PORT"
            SERVICE_PORT=$((SERVICE_PORT + 1))
            remora memnode --fabric verbs --listen "$addr" --service "$index" $SERVICE_MEMNODE_ARGS \
                > /tmp/memnode-svc.log 2>&1 &
            SERVICE_NODE=$!
            for i in $(seq 1 300); do
                grep -q listening /tmp/memnode-svc.log && break
                kill -0 $SERVICE_NODE 2>/dev/null || break
                usleep 100000
            done
            sed 's/^/REMORA-BENCH: /' /tmp/memnode-svc.log
            if ! grep -q listening /tmp/memnode-svc.log; then
                kill -0 $SERVICE_NODE 2>/dev/null && echo "REMORA-BENCH: service memnode alive, not listening after 30 s"
                grep -i huge /proc/meminfo | sed 's/^/REMORA-BENCH: /'
            fi
            ;;
        esac
        say "bench: remora bench --fabric verbs --connect $addr --index $index --workload $workload $BENCH_ARGS"
        timeout "$BENCH_TIMEOUT" remora bench --fabric verbs --connect "$addr" --quiet \
            --index "$index" --workload "$workload" $BENCH_ARGS > /tmp/bench.out 2>&1
        rc=$?
        sed 's/^/REMORA-BENCH: /' /tmp/bench.out
        if [ "$rc" = 0 ] && ! grep -q "^[A-Z]* *run " /tmp/bench.out; then
            rc="no-run-row"
        fi
        if [ -n "$SERVICE_NODE" ]; then
            kill $SERVICE_NODE 2>/dev/null
            wait $SERVICE_NODE 2>/dev/null
            tail -n 2 /tmp/memnode-svc.log | sed 's/^/REMORA-BENCH: /'
        fi
        say "bench $index $workload exit code $rc"
        [ "$rc" = 0 ] || BENCH_RC=1
    done
fi

[ -n "$BENCH_ARGS" ] && expect_error "index needs another service" 'runs the `echo` service' \
    remora bench --fabric verbs --connect "$GUEST_IP:$PORT" --index canrt --records 10 --quiet

kill $MEMNODE 2>/dev/null
wait $MEMNODE 2>/dev/null
tail -n 3 /tmp/memnode.log

expect_error "nobody listening" "refused the connection" \
    remora perf --fabric verbs --connect "$GUEST_IP:7999" --seconds 0.2 --quiet
expect_error "unknown device" "no RDMA device named mlx5_9" \
    remora perf --fabric verbs --device mlx5_9 --connect "$GUEST_IP:$PORT" --quiet
expect_error "address not here" "cannot bind" \
    remora memnode --fabric verbs --listen 192.0.2.99:7000
# A memory node that dies under a running client: the transport gives up (retry exceeded).
remora memnode --fabric verbs --listen "$GUEST_IP:7472" --region-mib 8 --chunk-kib 256 > /tmp/memnode2.log 2>&1 &
DOOMED=$!
for i in $(seq 1 50); do grep -q listening /tmp/memnode2.log 2>/dev/null && break; usleep 100000; done
# Killed once the client's queue pair is up (both ends RC in RTS; after 20 s regardless), not
# after a fixed sleep that a slow (TCG, loaded host) start-up of the client can outlast.
(
    for i in $(seq 1 200); do
        [ "$(rdma resource show qp 2>/dev/null | grep -c 'type RC.*state RTS')" -ge 2 ] && break
        usleep 100000
    done
    usleep 300000
    kill -9 $DOOMED
) &
expect_error "memory node died" "does not answer" \
    timeout 90 remora perf --fabric verbs --connect "$GUEST_IP:7472" --seconds 30 --quiet
wait
ip link set dummy0 down
usleep 500000
expect_error "port down" "is DOWN" \
    remora perf --fabric verbs --connect "$GUEST_IP:$PORT" --quiet

if [ "$CHECK_RC" = 0 ] && [ "$ERRORS_RC" = 0 ] && { [ "$PERF_RC" = 0 ] || [ "$PERF_RC" = skipped ]; } &&
    { [ "$BENCH_RC" = 0 ] || [ "$BENCH_RC" = skipped ]; }; then
    finish PASS
fi
finish "FAIL (conformance $CHECK_RC, perf $PERF_RC, bench $BENCH_RC, error messages $ERRORS_RC)"
