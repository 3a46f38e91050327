#!/usr/bin/env bash
# Real verbs without an RDMA NIC: builds `remora` with `--features verbs`, packs it with a
# Debian kernel's Soft-RoCE modules, busybox and rdma-core into an initramfs, boots that
# under QEMU (TCG), and inside the guest runs a verbs memory node plus, from other
# processes, a SIGKILL campaign against clients of the node (then the fabric conformance
# suite on it), `remora perf` and small YCSB runs of `remora bench --fabric verbs` (SMART C and
# A; Sherman, CANRT, Erda C), the node's message rate with 1 ms of added RTT (netem) against
# none, its rate with 1 server thread against 2, `--key-file` refusals, and a compute node
# (examples/verbs_cluster.rs: several pollers) over two memory nodes, and a cluster run of
# three compute-node processes meeting at the memory node's barrier (`bench --cluster-size`,
# `remora merge`). Exit 0 only when the guest's serial console ends with
# "REMORA-GUEST: PASS".
#
# Usage: .ci/verbs-guest/run.sh            (from anywhere; needs root or sudo for apt-get)
# Environment:
#   REMORA_GUEST_CACHE   downloads and build products (default: <repo>/target/verbs-guest)
#   REMORA_GUEST_PERF    `remora perf` arguments in the guest ("" skips perf)
#   REMORA_GUEST_BENCH   `remora bench` arguments for every YCSB run ("" skips them)
#   REMORA_GUEST_BENCH_RUNS  the runs, index:workload each (default: SMART C and A, Sherman,
#                        CANRT and Erda C; CANRT and Erda on a memnode of their --service)
#   REMORA_GUEST_KILLS   clients SIGKILLed in the kill campaign (default 6; 0 skips it)
#   REMORA_GUEST_SECTIONS  what the guest runs (default: all of "check perf strace bench
#                        errors rtt threads auth cluster ranks"; the kill campaign runs before
#                        "check")
#   REMORA_GUEST_TIMEOUT seconds before the guest is killed (default 900)
#   CARGO_TARGET_DIR     where cargo builds (default: <repo>/target)
# Facts this relies on: ../../../shared/notes/soft-roce-guest.md (modules and their order,
# -accel tcg, providers in the initramfs).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${REMORA_GUEST_CACHE:-$ROOT/target/verbs-guest}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
PERF=${REMORA_GUEST_PERF-"--verbs read,write,write-imm,cas,faa,send --sizes 64,4096 --seconds 0.5 --threads 1 --coroutines 4"}
BENCH=${REMORA_GUEST_BENCH-"--records 2000 --seconds 1 --threads 1 --coroutines 4"}
BENCH_RUNS=${REMORA_GUEST_BENCH_RUNS:-"smart:c smart:a sherman:c canrt:c erda:c"}
TIMEOUT=${REMORA_GUEST_TIMEOUT:-900}
KILLS=${REMORA_GUEST_KILLS:-6}
SECTIONS=${REMORA_GUEST_SECTIONS:-"check perf strace bench errors rtt threads auth cluster ranks"}
MODULES="crc32_generic crc32c_generic libcrc32c udp_tunnel ip6_udp_tunnel ib_core ib_uverbs rdma_rxe dummy configfs iw_cm ib_cm rdma_cm rdma_ucm veth sch_netem"
HOST_PKGS="qemu-system-x86 busybox-static libibverbs-dev librdmacm-dev libclang-dev ibverbs-providers iproute2 cpio kmod xz-utils gzip strace"
MULTIARCH=x86_64-linux-gnu
T0=$(date +%s)

say() { echo "verbs-guest [$(( $(date +%s) - T0 ))s]: $*" >&2; }
die() {
    say "FAIL: $*"
    exit 1
}

mkdir -p "$CACHE/debs" "$CACHE/kernel"

# 1. Host packages (CI starts from a fresh machine).
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
UPDATED=""
apt_update() {
    [ -n "$UPDATED" ] && return 0
    $SUDO apt-get update -qq
    UPDATED=1
}
missing=""
for p in $HOST_PKGS; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    say "installing$missing"
    apt_update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# 2. The Debian kernel with rdma_rxe (cached).
kernel_pkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }'; }
KPKG=$(kernel_pkg)
[ -n "$KPKG" ] || { apt_update; KPKG=$(kernel_pkg); }
[ -n "$KPKG" ] || die "apt-cache finds no linux-image package"
KDIR="$CACHE/kernel/$KPKG"
if [ ! -d "$KDIR/lib/modules" ]; then
    say "fetching $KPKG"
    fetch() { (cd "$CACHE/debs" && ls "${KPKG}"_*.deb >/dev/null 2>&1 || apt-get download "$KPKG" >/dev/null 2>&1); }
    fetch || { apt_update; fetch; } || die "apt-get download $KPKG failed"
    rm -rf "$KDIR.tmp"
    dpkg-deb -x "$CACHE"/debs/"${KPKG}"_*.deb "$KDIR.tmp"
    mv "$KDIR.tmp" "$KDIR"
fi
KVER=$(ls "$KDIR/lib/modules" | head -n 1)
KERNEL="$KDIR/boot/vmlinuz-$KVER"
# The uncompressed kernel boots faster under TCG (PVH entry); fall back to the bzImage.
if [ ! -s "$KDIR/vmlinux" ]; then
    off=$(LC_ALL=C grep -aboP '\xfd7zXZ\x00' "$KERNEL" 2>/dev/null | head -n 1 | cut -d: -f1 || true)
    if [ -n "$off" ]; then
        tail -c +$((off + 1)) "$KERNEL" | xz -dc >"$KDIR/vmlinux.tmp" 2>/dev/null || true
        if head -c 4 "$KDIR/vmlinux.tmp" | grep -q ELF; then
            mv "$KDIR/vmlinux.tmp" "$KDIR/vmlinux"
        fi
        rm -f "$KDIR/vmlinux.tmp"
    fi
fi
[ -s "$KDIR/vmlinux" ] && KERNEL="$KDIR/vmlinux"

# 3. The host-built binary.
say "building remora --features verbs (release)"
(cd "$ROOT" && cargo build --release --quiet -p remora-bins --features verbs)
(cd "$ROOT" && cargo build --release --quiet -p remora --features verbs --example verbs_cluster)
BIN="$TARGET/release/remora"
[ -x "$BIN" ] || die "no $BIN after the build"
CLUSTER_BIN="$TARGET/release/examples/verbs_cluster"
[ -x "$CLUSTER_BIN" ] || die "no $CLUSTER_BIN after the build"

# 4. The initramfs.
IR="$CACHE/initramfs"
rm -rf "$IR"
mkdir -p "$IR"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,etc/libibverbs.d,lib/modules/remora,lib64}
mkdir -p "$IR/lib/$MULTIARCH" "$IR/usr/lib/$MULTIARCH/libibverbs"
cp /bin/busybox "$IR/bin/busybox"
copy_libs() {
    # Every library `ldd` lists for $1, at the path it lists.
    ldd "$1" | awk '/=> \// { print $3 } /^[ \t]*\// { print $1 }' | while read -r lib; do
        mkdir -p "$IR$(dirname "$lib")"
        [ -e "$IR$lib" ] || cp -L "$lib" "$IR$lib"
    done
}
cp "$BIN" "$IR/usr/bin/remora"
copy_libs "$BIN"
cp "$CLUSTER_BIN" "$IR/usr/bin/verbs_cluster"
copy_libs "$CLUSTER_BIN"
# strace, when the host has it, for the guest's syscall count (informational).
STRACE=$(command -v strace || true)
if [ -n "$STRACE" ]; then
    cp "$STRACE" "$IR/usr/bin/strace"
    copy_libs "$STRACE"
fi
# iproute2's ip (veth pairs, policy routing) and tc (netem) for the added-RTT run, at
# /usr/sbin, beside busybox's own applets in /bin.
for tool in ip tc; do
    path=$(PATH=/usr/sbin:/sbin:/usr/bin:/bin command -v "$tool" || true)
    [ -n "$path" ] || die "no $tool (iproute2) on the host"
    cp "$path" "$IR/usr/sbin/$tool"
    copy_libs "$path"
done
RDMA_TOOL=$(command -v rdma || true)
[ -n "$RDMA_TOOL" ] || die "no rdma tool (iproute2) on the host"
rm -f "$IR/usr/bin/rdma"
cp "$RDMA_TOOL" "$IR/usr/bin/rdma"
copy_libs "$RDMA_TOOL"
PROVIDER=$(ls /usr/lib/$MULTIARCH/libibverbs/librxe-rdmav*.so | head -n 1)
[ -n "$PROVIDER" ] || die "no rxe provider (ibverbs-providers) on the host"
cp -L "$PROVIDER" "$IR/usr/lib/$MULTIARCH/libibverbs/"
copy_libs "$PROVIDER"
cp /etc/libibverbs.d/rxe.driver "$IR/etc/libibverbs.d/"
for lib in /lib/$MULTIARCH/libgcc_s.so.1 /lib/$MULTIARCH/libibverbs.so.1 /lib/$MULTIARCH/librdmacm.so.1; do
    [ -e "$IR$lib" ] || cp -L "$lib" "$IR$lib"
done
: >"$IR/etc/remora-modules"
for m in $MODULES; do
    ko=$(find "$KDIR/lib/modules/$KVER" -name "$m.ko" | head -n 1)
    [ -n "$ko" ] || die "module $m not in $KPKG"
    cp "$ko" "$IR/lib/modules/remora/$m.ko"
    echo "$m" >>"$IR/etc/remora-modules"
done
cat >"$IR/etc/remora-guest.conf" <<CONF
GUEST_IP=192.0.2.1
PORT=7471
HUGEPAGES=96
MEMNODE_ARGS="--region-mib 64 --chunk-kib 256 --dm-kib 256 --threads 2"
CHECK_TIMEOUT=480
PERF_TIMEOUT=240
PERF_ARGS="$PERF"
BENCH_TIMEOUT=180
SERVICE_PORT=7473
SERVICE_MEMNODE_ARGS="--region-mib 64 --chunk-kib 256"
BENCH_ARGS="$BENCH"
BENCH_RUNS="$BENCH_RUNS"
KILLS=$KILLS
SECTIONS="$SECTIONS"
RTT_PORT=7480
AUTH_PORT=7481
THREADS_PORT=7490
CLUSTER_PORT=7500
CLUSTER_ARGS="--pollers 3 --threads 3 --keys 200"
CONF
cp "$HERE/init.sh" "$IR/init"
chmod +x "$IR/init"
(cd "$IR" && find . | cpio -o -H newc --quiet | gzip -1 >"$CACHE/initramfs.cpio.gz")
say "initramfs $(du -h "$CACHE/initramfs.cpio.gz" | cut -f1), kernel $(basename "$KERNEL") $KVER"

# 5. Boot. No network device: all traffic stays on the guest's dummy0.
say "booting the guest (QEMU TCG, 2 vCPUs)"
LOG="$CACHE/console.log"
set +e
timeout "$TIMEOUT" qemu-system-x86_64 -accel tcg -cpu max -m 2G -smp 2 -nographic -no-reboot \
    -nic none -kernel "$KERNEL" -initrd "$CACHE/initramfs.cpio.gz" \
    -append "console=ttyS0 quiet panic=-1 rdinit=/init" </dev/null | tee "$LOG"
QEMU_RC=${PIPESTATUS[0]}
set -e
if grep -q "^REMORA-GUEST: PASS" "$LOG"; then
    say "PASS in $(( $(date +%s) - T0 )) s"
    exit 0
fi
[ "$QEMU_RC" = 124 ] && die "the guest did not finish within $TIMEOUT s (log: $LOG)"
die "the guest reported no PASS (qemu exit $QEMU_RC; log: $LOG)"
