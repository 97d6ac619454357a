#!/bin/sh
# Binds NVMe devices to vfio-pci for bdevkit's user-space NVMe driver, like
# SPDK's scripts/setup.sh (POSIX sh: runs in the VM's busybox too).
#
#   scripts/setup.sh [config]   bind every NVMe function (class 0x0108) to
#                               vfio-pci; only those in PCI_ALLOWED (space
#                               separated BDFs) when it is set
#   scripts/setup.sh reset      bind them back to the kernel's nvme driver
#   scripts/setup.sh status     list NVMe functions and their drivers
#
# A device with a mounted file system (or used swap) is refused.
set -eu

SYS=/sys/bus/pci/devices

nvme_devices() {
    for d in "$SYS"/*; do
        [ -e "$d/class" ] || continue
        case "$(cat "$d/class")" in 0x0108*) basename "$d" ;; esac
    done
}

allowed() {
    [ -z "${PCI_ALLOWED:-}" ] && return 0
    for a in $PCI_ALLOWED; do [ "$a" = "$1" ] && return 0; done
    return 1
}

driver_of() {
    if [ -e "$SYS/$1/driver" ]; then basename "$(readlink "$SYS/$1/driver")"; else echo none; fi
}

in_use() {
    # Block devices of the controller at $1 that are mounted or swapped on.
    for b in "$SYS/$1"/nvme/nvme*/nvme*n*; do
        [ -e "$b" ] || continue
        n=$(basename "$b")
        if grep -q "^/dev/$n" /proc/mounts /proc/swaps 2>/dev/null; then
            echo "$n"
            return 0
        fi
    done
    return 1
}

bind() {
    bdf=$1; drv=$2
    cur=$(driver_of "$bdf")
    [ "$cur" = "$drv" ] && return 0
    [ "$cur" != none ] && echo "$bdf" > "$SYS/$bdf/driver/unbind"
    echo "$drv" > "$SYS/$bdf/driver_override"
    echo "$bdf" > /sys/bus/pci/drivers_probe
    echo > "$SYS/$bdf/driver_override"
}

config() {
    modprobe vfio-pci 2>/dev/null || true
    # busybox modprobe ignores soft dependencies: load the IOMMU backend too.
    modprobe vfio_iommu_type1 2>/dev/null || true
    for bdf in $(nvme_devices); do
        allowed "$bdf" || { echo "$bdf: skipped (not in PCI_ALLOWED)"; continue; }
        if dev=$(in_use "$bdf"); then
            echo "$bdf: /dev/$dev is in use (mounted or swap); not binding" >&2
            continue
        fi
        bind "$bdf" vfio-pci
        echo "$bdf: $(driver_of "$bdf") (IOMMU group $(basename "$(readlink "$SYS/$bdf/iommu_group" 2>/dev/null || echo none)"))"
    done
}

reset() {
    modprobe nvme 2>/dev/null || true
    for bdf in $(nvme_devices); do
        allowed "$bdf" || continue
        bind "$bdf" nvme
        echo "$bdf: $(driver_of "$bdf")"
    done
}

status() {
    printf '%-14s %-10s %s\n' BDF DRIVER VENDOR:DEVICE
    for bdf in $(nvme_devices); do
        printf '%-14s %-10s %s:%s\n' "$bdf" "$(driver_of "$bdf")" \
            "$(cat "$SYS/$bdf/vendor")" "$(cat "$SYS/$bdf/device")"
    done
}

case "${1:-config}" in
    config) config ;;
    reset) reset ;;
    status) status ;;
    *) echo "usage: $0 [config|reset|status]" >&2; exit 2 ;;
esac
