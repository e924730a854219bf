#!/bin/bash
# make clean-hosts: remove what real-host runs (make realhosts, make e2e,
# opke sim --hosts real) left behind when they were killed instead of
# stopped: the machines (runc containers under /run/opke/runc), the
# processes in the simulators' network namespaces (dnsmasq, the registry
# mirror) and the namespaces (opke-*), the machines' roots and disks
# (mounts), loop devices over files that are gone, and the Go tests'
# folders that held machines (/tmp/Test*/…/hosts). A simulator stopped
# normally removes its own; one restarted on the same state folder finds
# and removes what it left. Run as root, when no real-host test or
# simulator is running: theirs go too.
set -uo pipefail
[ "$(id -u)" -eq 0 ] || { echo "clean-hosts: run it as root" >&2; exit 1; }
runc_root=/run/opke/runc roots=/run/opke/roots tmp=${TMPDIR:-/tmp}

machines=0
if [ -d "$runc_root" ]; then
  for id in $(runc --root "$runc_root" list -q 2>/dev/null); do
    runc --root "$runc_root" delete --force "$id" >/dev/null 2>&1 && machines=$((machines + 1))
  done
fi

namespaces=0
for ns in $(ip netns list | awk '$1 ~ /^opke-/ {print $1}'); do
  ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns delete "$ns" && namespaces=$((namespaces + 1))
done

# Deepest first: a machine's root is stacked on its disk's folder.
mounts=0
for m in $(awk -v roots="$roots/" '{ if (index($5, roots) == 1 || $5 ~ /\/hosts\/[^\/]+\/disk$/) print $5 }' /proc/self/mountinfo | sort -r); do
  umount -l "$m" 2>/dev/null && mounts=$((mounts + 1))
done
[ -d "$roots" ] && find "$roots" -mindepth 1 -maxdepth 1 -type d -empty -delete

loops=0
for dev in $(losetup --noheadings --output NAME,BACK-FILE | awk -v t="$tmp/Test" '{ if ($0 ~ /\(deleted\)/ || $2 ~ /\/hosts\// || index($2, t) == 1) print $1 }'); do
  losetup -d "$dev" 2>/dev/null && loops=$((loops + 1))
done

folders=0
for d in "$tmp"/Test*; do
  [ -d "$d" ] || continue
  if find "$d" -maxdepth 3 -type d -name hosts -print -quit | grep -q .; then
    rm -rf "$d" && folders=$((folders + 1))
  fi
done

echo "clean-hosts: $machines machines, $namespaces network namespaces, $mounts mounts, $loops loop devices, $folders test folders removed"
left=$( (runc --root "$runc_root" list -q 2>/dev/null; ip netns list | awk '$1 ~ /^opke-/'; awk -v roots="$roots/" 'index($5, roots) == 1' /proc/self/mountinfo) | wc -l)
if [ "$left" -ne 0 ]; then
  echo "clean-hosts: $left left (a simulator still running?)" >&2
  exit 1
fi
