#!/bin/sh
# mmdebstrap's customize hook: the Debian root made a Flatcar-like host
# wherever OPKE depends on it. $1 is the root. Changing this file (or the
# package list in image.go) changes the image's hash, and so rebuilds it.
set -eu
R="$1"

# sshd's host keys are made at each host's first boot, never shipped in
# the image (Flatcar: sshd-keygen.service).
rm -f "$R"/etc/ssh/ssh_host_*
cat > "$R"/etc/systemd/system/sshd-keygen.service <<'UNIT'
[Unit]
Description=Generate the SSH host keys at first boot
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key
Before=ssh.service

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
UNIT
chroot "$R" systemctl enable sshd-keygen.service ssh.service >/dev/null 2>&1

# core: uid and gid 500 as on Flatcar, unprivileged, passwordless sudo.
chroot "$R" groupadd -g 500 core
chroot "$R" useradd -u 500 -g 500 -G sudo -m -s /bin/bash core
echo 'core ALL=(ALL) NOPASSWD: ALL' > "$R"/etc/sudoers.d/core
chmod 0440 "$R"/etc/sudoers.d/core
# Ignition writes Flatcar's authorized_keys.d/ignition; sshd reads it there
# as Flatcar's sshd_config has it.
printf 'AuthorizedKeysFile .ssh/authorized_keys .ssh/authorized_keys.d/ignition\n' > "$R"/etc/ssh/sshd_config.d/flatcar.conf

# As on Flatcar: Ignition reads it to decide whether to relabel.
mkdir -p "$R"/etc/selinux
printf 'SELINUX=disabled\nSELINUXTYPE=mcs\n' > "$R"/etc/selinux/config

# The host's own name resolves from nss-myhostname before DNS, as on
# Flatcar: sudo looks it up, and a host without DNS would wait for it.
sed -i 's/^hosts:.*/hosts:          files myhostname dns/' "$R"/etc/nsswitch.conf

# The network from DHCP, as Flatcar's systemd-networkd takes it
# (/usr/lib/systemd/network/zz-default.network there, which matches every
# interface but veths: a machine's NIC is one here): the address, the
# default route and the DNS servers, which systemd-resolved lists in
# /run/systemd/resolve/resolv.conf.
mkdir -p "$R"/etc/systemd/network
cat > "$R"/etc/systemd/network/zz-default.network <<'NET'
[Match]
Name=eth*

[Network]
DHCP=yes
KeepConfiguration=dhcp-on-stop

[DHCPv4]
UseMTU=true
UseDomains=true
NET
chroot "$R" systemctl enable systemd-networkd.service systemd-resolved.service >/dev/null 2>&1

# Flatcar's writable places.
mkdir -p "$R"/opt/bin "$R"/var/lib "$R"/etc/kubernetes
# The host name is the server's (the metadata's on Flatcar), not the
# builder's.
rm -f "$R"/etc/hostname
# No machine id: systemd makes one at first boot and, as on Flatcar,
# applies the unit presets then (Ignition enables units by preset).
rm -f "$R"/etc/machine-id

# What a container cannot run (no udev, no real consoles, no kernel
# config to mount).
chroot "$R" systemctl mask \
  systemd-udevd.service systemd-udevd-kernel.socket systemd-udevd-control.socket \
  systemd-udev-trigger.service systemd-udev-settle.service \
  getty@tty1.service console-getty.service serial-getty@.service \
  systemd-remount-fs.service sys-kernel-config.mount sys-kernel-debug.mount \
  sys-kernel-tracing.mount dev-hugepages.mount systemd-modules-load.service \
  systemd-sysctl.service systemd-firstboot.service >/dev/null 2>&1

# The machine's PID 1: it shows the machine its own cgroup as the root of
# each cgroup hierarchy, as a host sees its own (kind's entrypoint does the
# same), and keeps the machine's path valid beneath it for what reads
# /proc/self/cgroup; then systemd. Without it, the kubelet's systemd cgroup
# driver looks for kubepods.slice at the host's root while this systemd
# made it beneath the machine's cgroup.
mkdir -p "$R"/usr/lib/opke
cat > "$R"/usr/lib/opke/machine-init <<'INIT'
#!/bin/sh
set -eu
cg="${OPKE_CGROUP:?}"
# The v1 hierarchies the host has not mounted, which systemd mounts from
# the kernel's one hierarchy of each: mounted here first, the machine moved
# into its own cgroup in each, so that they are the machine's alone as a
# VM's are. Else every machine's containerd shares them: three controllers'
# etcd-member containers in one /opke/etcd-member, whose removal fails while
# another machine's etcd is in it.
for c in hugetlb net_cls,net_prio perf_event rdma misc; do
  grep -q "^${c%%,*}[[:space:]].*1$" /proc/cgroups || continue
  m=/sys/fs/cgroup/$c
  findmnt -rn "$m" >/dev/null && continue
  mkdir -p "$m" 2>/dev/null || continue
  mount -t cgroup -o "$c" cgroup "$m" || continue
  mkdir -p "$m$cg"
  echo $$ > "$m$cg/cgroup.procs"
done
for m in $(findmnt -rn -t cgroup,cgroup2 -o TARGET); do
  [ -d "$m$cg" ] || continue
  mount --bind "$m$cg" "$m"
  mkdir -p "$m$cg"
  mount --bind "$m" "$m$cg"
done
# systemd makes every mount shared at boot on a machine (mount-setup.c),
# as kubelet's mountPropagation (HostToContainer, Bidirectional) needs, and
# skips it in a container: a Flatcar VM has shared mounts, so this machine
# has them too. Its root is a slave of the host's (runc), so nothing it
# mounts reaches the host.
mount --make-rshared /
exec /sbin/init "$@"
INIT
chmod 0755 "$R"/usr/lib/opke/machine-init
