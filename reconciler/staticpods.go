package reconciler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"sigs.k8s.io/yaml"
)

// staticPod is what a static pod's manifest says that the kubelet's
// mirror of it shows once the kubelet runs that manifest: its
// annotations (OPKE's carry the sha256 of the files the pod reads) and
// its containers' images and commands (its flags).
type staticPod struct {
	Metadata struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Containers []struct {
			Name    string   `json:"name"`
			Image   string   `json:"image"`
			Command []string `json:"command"`
		} `json:"containers"`
	} `json:"spec"`
	Status struct {
		Conditions []struct{ Type, Status string } `json:"conditions"`
	} `json:"status"`
}

// parseStaticPod reads a static pod's manifest.
func parseStaticPod(b []byte) (staticPod, error) {
	var p staticPod
	if err := yaml.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("static pod manifest: %w", err)
	}
	if p.Metadata.Name == "" {
		return p, errors.New("static pod manifest: no name")
	}
	if p.Metadata.Namespace == "" {
		p.Metadata.Namespace = "default"
	}
	return p, nil
}

// staticPodsRun checks, through the host's API server, that the kubelet
// runs each of the host's static pods from its manifest as pushed: its
// mirror pod (<name>-<host>) carries the manifest's annotations and
// containers, and is Ready. A gate that only asked /readyz could pass on
// the pod the kubelet has not replaced yet, and let the next controller
// restart while this one does.
func (p *prober) staticPodsRun(ctx context.Context, k *kubeClient) error {
	for _, want := range p.g.pods {
		name := want.Metadata.Name + "-" + p.g.host
		var got staticPod
		code, body, err := k.do(ctx, http.MethodGet, "/api/v1/namespaces/"+want.Metadata.Namespace+"/pods/"+name, "", nil, &got)
		switch {
		case err != nil:
			return fmt.Errorf("static pod %s: %w", name, err)
		case code == http.StatusNotFound:
			return fmt.Errorf("static pod %s: no mirror pod yet", name)
		case code != http.StatusOK:
			return fmt.Errorf("static pod %s: %d %s", name, code, firstLine(body))
		}
		for k, v := range want.Metadata.Annotations {
			if got.Metadata.Annotations[k] != v {
				return fmt.Errorf("static pod %s still runs another manifest (annotation %s)", name, k)
			}
		}
		if len(got.Spec.Containers) != len(want.Spec.Containers) {
			return fmt.Errorf("static pod %s still runs another manifest (%d containers)", name, len(got.Spec.Containers))
		}
		for i, c := range want.Spec.Containers {
			g := got.Spec.Containers[i]
			if g.Name != c.Name || g.Image != c.Image || !slices.Equal(g.Command, c.Command) {
				return fmt.Errorf("static pod %s still runs another manifest (container %s)", name, c.Name)
			}
		}
		if !slices.ContainsFunc(got.Status.Conditions, func(c struct{ Type, Status string }) bool { return c.Type == "Ready" && c.Status == "True" }) {
			return fmt.Errorf("static pod %s is not Ready", name)
		}
	}
	return nil
}
