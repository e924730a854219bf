package ignition

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	v33 "github.com/coreos/ignition/v2/config/v3_3"
	"github.com/coreos/ignition/v2/config/v3_3/types"
	"golang.org/x/crypto/ssh"

	"opke.dev/opke/schemas"
)

// MaxUserData is the most raw user_data may hold: Nova accepts 65,535 bytes
// once base64-encoded, which is 49,149 raw bytes; we keep a margin.
const MaxUserData = 49_000

// Input is what a role's config depends on. It deliberately has no version
// and no secret.
type Input struct {
	Role schemas.Role
	// OPKEPublicKey is OPKE's SSH public key, authorized_keys form.
	OPKEPublicKey string
}

// ErrTooLarge is returned for a config over MaxUserData.
var ErrTooLarge = errors.New("ignition config is larger than user_data allows")

// A config depends on its role and OPKE's public key only, and Ignition's
// validation is the costly part of a render; so each role's config is
// built and validated once, with a placeholder where the key goes, and a
// render puts the key (checked here) in the placeholder's place. A cache
// by input held every cluster's three configs: 12.5 MB at 1,000 clusters,
// for the re-renders of a planner that keeps each cluster's desired state
// anyway.
var templates sync.Map // schemas.Role -> template

type template struct {
	once      sync.Once
	out       []byte
	err       error
	at        int // the placeholder's offset in out
	wasKeyLen int // its length as JSON
}

// placeholder is a well-formed key that build writes where OPKE's key
// goes; no real key is this one.
const placeholder = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE9QS0UncyBwdWJsaWMga2V5IGdvZXMgaGVyZSEhISEh opke-placeholder"

// Render returns the role's config as JSON.
func Render(in Input) ([]byte, error) {
	key := strings.TrimSpace(in.OPKEPublicKey)
	if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(key)); err != nil {
		return nil, fmt.Errorf("render %s ignition: OPKE's public key: %w", in.Role, err)
	}
	v, _ := templates.LoadOrStore(in.Role, &template{})
	t := v.(*template)
	t.once.Do(func() { t.out, t.at, t.wasKeyLen, t.err = buildTemplate(in.Role) })
	if t.err != nil {
		return nil, t.err
	}
	quoted, err := json.Marshal(key)
	if err != nil {
		return nil, fmt.Errorf("render %s ignition: %w", in.Role, err)
	}
	out := make([]byte, 0, len(t.out)-t.wasKeyLen+len(quoted))
	out = append(append(append(out, t.out[:t.at]...), quoted...), t.out[t.at+t.wasKeyLen:]...)
	if len(out) > MaxUserData {
		return nil, fmt.Errorf("render %s ignition: %d bytes: %w", in.Role, len(out), ErrTooLarge)
	}
	return out, nil
}

// buildTemplate builds the role's config with the placeholder key and
// finds where the key is.
func buildTemplate(role schemas.Role) (out []byte, at, n int, err error) {
	out, err = build(Input{Role: role, OPKEPublicKey: placeholder})
	if err != nil {
		return nil, 0, 0, err
	}
	quoted, _ := json.Marshal(placeholder)
	if at = bytes.Index(out, quoted); at < 0 || bytes.Count(out, quoted) != 1 {
		return nil, 0, 0, fmt.Errorf("render %s ignition: the key's place is not found once in the config", role)
	}
	return out, at, len(quoted), nil
}

func build(in Input) ([]byte, error) {
	if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(in.OPKEPublicKey)); err != nil {
		return nil, fmt.Errorf("render %s ignition: OPKE's public key: %w", in.Role, err)
	}
	cfg := types.Config{Ignition: types.Ignition{Version: "3.3.0"}}
	cfg.Passwd.Users = []types.PasswdUser{{Name: "core", SSHAuthorizedKeys: []types.SSHAuthorizedKey{types.SSHAuthorizedKey(strings.TrimSpace(in.OPKEPublicKey))}}}
	add := func(path string, mode int, content string) {
		cfg.Storage.Files = append(cfg.Storage.Files, file(path, mode, content))
	}
	dir := func(path string, mode int) {
		cfg.Storage.Directories = append(cfg.Storage.Directories, types.Directory{Node: types.Node{Path: path}, DirectoryEmbedded1: types.DirectoryEmbedded1{Mode: &mode}})
	}
	unit := func(name, contents string) {
		cfg.Systemd.Units = append(cfg.Systemd.Units, types.Unit{Name: name, Contents: &contents, Enabled: ptr(true)})
	}
	add("/etc/opke/role", 0o644, string(in.Role)+"\n")
	add("/etc/ssh/sshd_config.d/50-opke.conf", 0o600, sshdConfig(in.Role))
	unit("opke-host-keys.service", hostKeysUnit)
	// OS updates: Flatcar's update engine stages them on the passive
	// partition; its reboot manager (locksmithd) would reboot at once,
	// undrained, so it is off on every host, and a timer tells that a
	// reboot waits (assets.PathRebootRequired) for OPKE to coordinate
	// (spec.upgrade.osReboots).
	cfg.Systemd.Units = append(cfg.Systemd.Units,
		types.Unit{Name: "locksmithd.service", Mask: ptr(true)},
		types.Unit{Name: "opke-reboot-required.service", Contents: ptr(rebootRequiredUnit)})
	unit("opke-reboot-required.timer", rebootRequiredTimer)
	switch in.Role {
	case schemas.RoleGateway:
		// The gateway only forwards SSH to the cluster's hosts.
	case schemas.RoleController, schemas.RoleWorker:
		add("/etc/sysctl.d/80-opke.conf", 0o644, sysctls)
		add("/etc/modules-load.d/opke.conf", 0o644, "overlay\nbr_netfilter\n")
		for _, d := range []struct {
			path string
			mode int
		}{
			{"/etc/kubernetes", 0o755}, {"/etc/kubernetes/pki", 0o700}, {"/etc/kubernetes/manifests", 0o755},
			{"/var/lib/kubelet", 0o755}, {"/etc/cni/net.d", 0o755}, {"/opt/cni/bin", 0o755},
		} {
			dir(d.path, d.mode)
		}
		add("/opt/opke/bin/install-kubelet", 0o755, installKubelet)
		unit("kubelet.service", kubeletUnit)
		if in.Role == schemas.RoleController {
			dir("/etc/kubernetes/pki/etcd", 0o700)
			dir("/var/lib/etcd", 0o700)
			unit("etcd-member.service", etcdUnit)
		}
	default:
		return nil, fmt.Errorf("render ignition: unknown role %q", in.Role)
	}
	out, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("render %s ignition: %w", in.Role, err)
	}
	if _, rpt, err := v33.Parse(out); err != nil || rpt.IsFatal() {
		return nil, fmt.Errorf("render %s ignition: invalid config: %v %w", in.Role, rpt.String(), err)
	}
	if len(out) > MaxUserData {
		return nil, fmt.Errorf("render %s ignition: %d bytes: %w", in.Role, len(out), ErrTooLarge)
	}
	return out, nil
}

func ptr[T any](v T) *T { return &v }

func file(path string, mode int, content string) types.File {
	src := "data:;base64," + base64.StdEncoding.EncodeToString([]byte(content))
	return types.File{
		Node:          types.Node{Path: path, Overwrite: ptr(true)},
		FileEmbedded1: types.FileEmbedded1{Mode: &mode, Contents: types.Resource{Source: &src}},
	}
}

func sshdConfig(role schemas.Role) string {
	// Ignition writes core's keys to authorized_keys.d/ignition; OPKE pushes
	// the operators' keys (spec.sshAuthorizedKeys) to .../opke-operators.
	c := "AuthorizedKeysFile .ssh/authorized_keys .ssh/authorized_keys.d/ignition .ssh/authorized_keys.d/opke-operators\n" +
		"PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin no\n"
	if role == schemas.RoleGateway {
		return c + "AllowTcpForwarding yes\nAllowAgentForwarding no\nX11Forwarding no\n"
	}
	return c + "AllowTcpForwarding local\n"
}

// hostKeysUnit prints the host's SSH host keys at boot, in the block cloud
// images print and OPKE reads from Nova's console log to pin them
// (sshx.HostKeysFromConsole), on the serial console: Nova's console log
// is the first serial port, and Flatcar's image boots with
// console=ttyS0,115200n8 console=tty0, so /dev/console is the screen
// (tty0), which the log never shows. It goes to the journal and
// /dev/console too. Flatcar has no cloud-init and prints none of its
// own: without this unit no host could be reached with a pinned key. The
// keys are made first if sshd-keygen has not yet (ssh-keygen -A makes
// only the missing ones, and never prints a secret).
const hostKeysUnit = `[Unit]
Description=Print the SSH host keys on the serial console, for OPKE to pin them
After=sshd-keygen.service
Before=sshd.socket sshd.service ssh.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/ssh-keygen -A
ExecStart=/bin/sh -c 'keys() { echo "-----BEGIN SSH HOST KEY KEYS-----"; cat /etc/ssh/ssh_host_*_key.pub; echo "-----END SSH HOST KEY KEYS-----"; }; if [ -c /dev/ttyS0 ]; then keys > /dev/ttyS0 || true; fi; keys'
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
`

// rebootRequiredUnit writes /run/reboot-required once Flatcar's update
// engine has staged an update, which a reboot finishes; a host without
// the update engine (Debian's way: packages write the file themselves)
// skips it.
const rebootRequiredUnit = `[Unit]
Description=Say that a staged OS update waits for a reboot (/run/reboot-required)
ConditionPathExists=/usr/bin/update_engine_client
ConditionPathExists=!/run/reboot-required

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'if /usr/bin/update_engine_client -status 2>/dev/null | grep -qx CURRENT_OP=UPDATE_STATUS_UPDATED_NEED_REBOOT; then echo "*** System restart required (Flatcar update staged) ***" > /run/reboot-required; fi'
`

const rebootRequiredTimer = `[Unit]
Description=Look every five minutes whether a staged OS update waits for a reboot

[Timer]
OnBootSec=2min
OnUnitActiveSec=5min

[Install]
WantedBy=timers.target
`

const sysctls = `net.ipv4.ip_forward = 1
net.bridge.bridge-nf-call-iptables = 1
net.bridge.bridge-nf-call-ip6tables = 1
fs.inotify.max_user_watches = 524288
fs.inotify.max_user_instances = 8192
`

// The kubelet runs natively from /opt/bin/kubelet, as kubeadm's layout
// runs it, with the systemd unit kubeadm's packages give it; its binary
// and the reference CNI plugins are upstream's release files that the
// pushed /etc/kubernetes/kubelet.env names (KUBELET_URL, CNI_PLUGINS_URL:
// dl.k8s.io and the plugins' GitHub release, or the spec's download
// mirror), fetched and checked against the sha256 published beside each
// by installKubelet, once per URL, as kubeadm's install docs fetch them
// (Flatcar ships neither). The unit names no version, so an upgrade
// changes kubelet.env, never user_data. See docs/real-cloud.md.
const kubeletUnit = `[Unit]
Description=Kubernetes kubelet (the release /etc/kubernetes/kubelet.env names)
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target containerd.service
Requires=containerd.service
ConditionPathExists=/etc/kubernetes/kubelet.env
StartLimitIntervalSec=0

[Service]
EnvironmentFile=/etc/kubernetes/kubelet.env
ExecStartPre=/opt/opke/bin/install-kubelet
ExecStart=/opt/bin/kubelet --config=/var/lib/kubelet/config.yaml \
  --kubeconfig=/etc/kubernetes/kubelet.conf $KUBELET_ARGS
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
`

// installKubelet installs the kubelet at /opt/bin/kubelet and the CNI
// plugins in /opt/cni/bin from the URLs kubelet.env names, each checked
// against the sha256 file beside it (the digest alone, as dl.k8s.io
// publishes it, or "DIGEST  NAME", as GitHub releases' are) before it is
// used, and each replaced by a rename (a plugin running keeps its file).
// What is installed from the same URL already is kept. It has no version
// of its own.
const installKubelet = `#!/bin/sh
# Installs the kubelet (/opt/bin/kubelet) and the reference CNI plugins
# (/opt/cni/bin) that /etc/kubernetes/kubelet.env names (KUBELET_URL,
# CNI_PLUGINS_URL): upstream's release files, each checked against the
# sha256 published beside it before it is used; what was installed from
# the same URL is kept. From OPKE's Ignition.
set -eu
: "${KUBELET_URL:?KUBELET_URL is not set}" "${CNI_PLUGINS_URL:?CNI_PLUGINS_URL is not set}"
mkdir -p /opt/bin /opt/cni/bin
tmp=$(mktemp -d /opt/.opke-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
get() { # URL FILE
  url=$1 out=$2
  shift 2
  if [ -n "${DOWNLOAD_CA:-}" ]; then set -- --cacert "$DOWNLOAD_CA"; fi
  curl --fail --silent --show-error --location --retry 5 --retry-delay 2 --retry-all-errors \
    --connect-timeout 10 "$@" -o "$out" "$url" || { echo "install-kubelet: $url: download failed" >&2; exit 1; }
}
fetch() { # URL FILE: the file, checked against URL.sha256
  get "$1" "$2"
  get "$1.sha256" "$2.sha256"
  want=$(head -n 1 "$2.sha256" | cut -d ' ' -f 1)
  case "$want" in
  *[!0-9a-f]* | "") echo "install-kubelet: $1.sha256 holds no sha256" >&2; exit 1 ;;
  esac
  if [ "${#want}" -ne 64 ] || ! echo "$want  $2" | sha256sum --check --status; then
    echo "install-kubelet: $1 does not match the sha256 beside it ($want)" >&2
    exit 1
  fi
}
if [ ! -x /opt/bin/kubelet ] || [ "$(cat /opt/bin/kubelet.url 2>/dev/null)" != "$KUBELET_URL" ]; then
  fetch "$KUBELET_URL" "$tmp/kubelet"
  install -m 0755 "$tmp/kubelet" /opt/bin/.kubelet.new
  mv -f /opt/bin/.kubelet.new /opt/bin/kubelet
  echo "$KUBELET_URL" > /opt/bin/kubelet.url
  echo "install-kubelet: installed the kubelet of $KUBELET_URL"
fi
if [ "$(cat /opt/cni/bin/.opke-url 2>/dev/null)" != "$CNI_PLUGINS_URL" ]; then
  fetch "$CNI_PLUGINS_URL" "$tmp/cni.tgz"
  mkdir "$tmp/cni"
  tar -C "$tmp/cni" -xzf "$tmp/cni.tgz" --no-same-owner
  for f in "$tmp"/cni/*; do
    [ -f "$f" ] || continue
    name=$(basename "$f")
    install -m 0755 "$f" "/opt/cni/bin/.$name.new"
    mv -f "/opt/cni/bin/.$name.new" "/opt/cni/bin/$name"
  done
  echo "$CNI_PLUGINS_URL" > /opt/cni/bin/.opke-url
  echo "install-kubelet: installed the CNI plugins of $CNI_PLUGINS_URL"
fi
`

// etcdUnit runs the controller's etcd member from the image and flags in
// the pushed /etc/kubernetes/etcd.env (ETCD_IMAGE and etcd's own ETCD_*),
// by the host's containerd (as Typhoon runs it by the host's runtime),
// the image pulled through the hosts' registry configuration when the
// host does not have it yet: a member that restarts, or a host that
// boots, while the registry is out of reach starts from the image it has.
const etcdUnit = `[Unit]
Description=etcd member (image and settings from /etc/kubernetes/etcd.env)
Wants=network-online.target
After=network-online.target containerd.service
Requires=containerd.service
ConditionPathExists=/etc/kubernetes/etcd.env
StartLimitIntervalSec=0

[Service]
EnvironmentFile=/etc/kubernetes/etcd.env
ExecStartPre=/bin/sh -c '/usr/bin/ctr --namespace opke images ls -q | grep -qxF "$$ETCD_IMAGE" || exec /usr/bin/ctr --namespace opke images pull --hosts-dir /etc/containerd/certs.d "$$ETCD_IMAGE"'
ExecStartPre=-/usr/bin/ctr --namespace opke tasks kill --signal SIGKILL etcd-member
ExecStartPre=-/usr/bin/ctr --namespace opke tasks delete etcd-member
ExecStartPre=-/usr/bin/ctr --namespace opke containers delete etcd-member
ExecStart=/usr/bin/ctr --namespace opke run --rm --net-host --env-file /etc/kubernetes/etcd.env \
  --mount type=bind,src=/var/lib/etcd,dst=/var/lib/etcd,options=rbind:rw \
  --mount type=bind,src=/etc/kubernetes/pki/etcd,dst=/etc/kubernetes/pki/etcd,options=rbind:ro \
  ${ETCD_IMAGE} etcd-member /usr/local/bin/etcd
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
`

// Contents reads back the files of a config that Render wrote, by path:
// what a host gets from it, for scans and for showing a user_data change.
func Contents(config []byte) (map[string][]byte, error) {
	var cfg types.Config
	if err := json.Unmarshal(config, &cfg); err != nil {
		return nil, fmt.Errorf("ignition config: %w", err)
	}
	out := make(map[string][]byte, len(cfg.Storage.Files))
	for _, f := range cfg.Storage.Files {
		if f.Contents.Source == nil {
			continue
		}
		data, ok := strings.CutPrefix(*f.Contents.Source, "data:;base64,")
		if !ok {
			return nil, fmt.Errorf("%s: not a base64 data URL: %.30q", f.Path, *f.Contents.Source)
		}
		b, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			return nil, fmt.Errorf("%s: data URL: %w", f.Path, err)
		}
		out[f.Path] = b
	}
	return out, nil
}
