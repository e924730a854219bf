package kubestub

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// ErrBadManifest is a kube-apiserver manifest the stub cannot run: the
// real kubelet would leave such a pod failing too.
var ErrBadManifest = errors.New("kube-apiserver manifest")

// Manifest is what the stub takes from the kube-apiserver static pod.
type Manifest struct {
	Version      string // the image tag, "v1.35.1"
	Port         int    // --secure-port, 6443 by default
	CertFile     string // --tls-cert-file
	KeyFile      string // --tls-private-key-file
	ClientCAFile string // --client-ca-file
	EtcdServers  []string
}

// StaticPod reads a static pod's manifest into the mirror pod its
// kubelet keeps of it on node: <name>-<node>, with its annotations and
// containers.
func StaticPod(data []byte, node string) (Pod, error) {
	var p corev1.Pod
	if err := yaml.UnmarshalStrict(data, &p); err != nil { // the kubelet refuses what is no Pod
		return Pod{}, fmt.Errorf("static pod: %w", err)
	}
	if p.Name == "" {
		return Pod{}, errors.New("static pod: no name")
	}
	out := Pod{Namespace: cmp.Or(p.Namespace, "default"), Name: p.Name + "-" + node, Node: node, Mirror: true, Annotations: p.Annotations, Labels: p.Labels}
	for _, c := range p.Spec.Containers {
		out.Containers = append(out.Containers, Container{Name: c.Name, Image: c.Image, Command: c.Command})
	}
	return out, nil
}

var gitVersion = regexp.MustCompile(`^v\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$`)

// ParseManifest reads a kube-apiserver static pod manifest.
func ParseManifest(data []byte) (Manifest, error) {
	var p corev1.Pod
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return Manifest{}, fmt.Errorf("%w: %w", ErrBadManifest, err)
	}
	var c *corev1.Container
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == "kube-apiserver" {
			c = &p.Spec.Containers[i]
		}
	}
	if c == nil {
		return Manifest{}, fmt.Errorf("%w: no kube-apiserver container", ErrBadManifest)
	}
	m := Manifest{Port: 6443}
	if tag := ImageTag(c.Image); gitVersion.MatchString(tag) {
		m.Version = tag
	} else {
		return Manifest{}, fmt.Errorf("%w: image %q has no version tag", ErrBadManifest, c.Image)
	}
	for _, arg := range append(append([]string{}, c.Command...), c.Args...) {
		k, v, ok := strings.Cut(arg, "=")
		if !ok {
			continue
		}
		switch k {
		case "--secure-port":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 65535 {
				return Manifest{}, fmt.Errorf("%w: --secure-port=%s", ErrBadManifest, v)
			}
			m.Port = n
		case "--tls-cert-file":
			m.CertFile = v
		case "--tls-private-key-file":
			m.KeyFile = v
		case "--client-ca-file":
			m.ClientCAFile = v
		case "--etcd-servers":
			m.EtcdServers = strings.Split(v, ",")
		}
	}
	for _, f := range []struct{ flag, value string }{
		{"--tls-cert-file", m.CertFile}, {"--tls-private-key-file", m.KeyFile}, {"--client-ca-file", m.ClientCAFile},
	} {
		if f.value == "" {
			return Manifest{}, fmt.Errorf("%w: %s is not set", ErrBadManifest, f.flag)
		}
	}
	return m, nil
}

// ImageTag returns the tag of an image reference (registry:5000/name:tag),
// or "" when it has none.
func ImageTag(image string) string {
	name := image[strings.LastIndex(image, "/")+1:]
	_, tag, _ := strings.Cut(name, ":")
	return tag
}

// KubeletRegistration reads a kubelet's flags (KUBELET_ARGS, as the unit
// passes them) for what it registers its node with: --node-labels
// (k=v,...) and --register-with-taints (key[=value]:Effect,...).
func KubeletRegistration(args string) (map[string]string, []corev1.Taint, error) {
	if uq, err := strconv.Unquote(args); err == nil {
		args = uq
	}
	var labels map[string]string
	var taints []corev1.Taint
	for _, f := range strings.Fields(args) {
		switch {
		case strings.HasPrefix(f, "--node-labels="):
			for _, kv := range strings.Split(strings.TrimPrefix(f, "--node-labels="), ",") {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return nil, nil, fmt.Errorf("--node-labels: %q is not key=value", kv)
				}
				if labels == nil {
					labels = map[string]string{}
				}
				labels[k] = v
			}
		case strings.HasPrefix(f, "--register-with-taints="):
			for _, t := range strings.Split(strings.TrimPrefix(f, "--register-with-taints="), ",") {
				kv, effect, ok := strings.Cut(t, ":")
				k, v, _ := strings.Cut(kv, "=")
				e := corev1.TaintEffect(effect)
				if !ok || k == "" || (e != corev1.TaintEffectNoSchedule && e != corev1.TaintEffectPreferNoSchedule && e != corev1.TaintEffectNoExecute) {
					return nil, nil, fmt.Errorf("--register-with-taints: %q is not key[=value]:Effect", t)
				}
				taints = append(taints, corev1.Taint{Key: k, Value: v, Effect: e})
			}
		}
	}
	return labels, taints, nil
}
