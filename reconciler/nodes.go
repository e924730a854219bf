package reconciler

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"opke.dev/opke/diff"
	"opke.dev/opke/render/pki"
)

// HealthReader reads the health of a cluster's Nodes through its API (for
// spec.remediation), and of its etcd members.
type HealthReader interface {
	// NodeHealth returns each Node's Ready condition, by name, and how
	// long it has had it at now.
	NodeHealth(ctx context.Context, t HostTarget, now time.Time) (map[string]diff.NodeHealth, error)
	// EtcdAnswers tells, by member name (its host's), whether each
	// started member of the cluster's etcd answers.
	EtcdAnswers(ctx context.Context, t HostTarget) (map[string]bool, error)
}

var _ HealthReader = (*HostSessions)(nil)

// NodeHealth lists the cluster's Nodes through the gateway, as admin,
// from the first controller whose API server answers.
func (h *HostSessions) NodeHealth(ctx context.Context, t HostTarget, now time.Time) (map[string]diff.NodeHealth, error) {
	c, err := h.asAdmin(ctx, t)
	if err != nil {
		return nil, err
	}
	defer c.close()
	var list nodeList
	code, body, err := c.api(ctx, http.MethodGet, "/api/v1/nodes", "", nil, &list)
	switch {
	case err != nil:
		return nil, err
	case code != http.StatusOK:
		return nil, fmt.Errorf("list nodes: %d %s", code, firstLine(body))
	}
	return list.health(now), nil
}

// nodeList is what a plan reads of the cluster's Nodes.
type nodeList struct {
	Items []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Status struct {
			Conditions []struct {
				Type               string    `json:"type"`
				Status             string    `json:"status"`
				LastTransitionTime time.Time `json:"lastTransitionTime"`
			} `json:"conditions"`
		} `json:"status"`
	} `json:"items"`
}

// health is each Node's Ready condition at now. A Node without one (its
// kubelet never posted a status) is Unknown; a condition without its
// transition's time is taken as just changed: how long it has been so
// cannot be told.
func (l nodeList) health(now time.Time) map[string]diff.NodeHealth {
	out := make(map[string]diff.NodeHealth, len(l.Items))
	for _, n := range l.Items {
		h := diff.NodeHealth{Ready: "Unknown"}
		for _, c := range n.Status.Conditions {
			if c.Type != "Ready" {
				continue
			}
			h.Ready = c.Status
			if !c.LastTransitionTime.IsZero() {
				h.For = max(now.Sub(c.LastTransitionTime), 0)
			}
		}
		out[n.Metadata.Name] = h
	}
	return out
}

// EtcdAnswers asks each member of the cluster's etcd its status through
// the gateway (listMembers), as OPKE's etcd client.
func (h *HostSessions) EtcdAnswers(ctx context.Context, t HostTarget) (map[string]bool, error) {
	b, err := pki.Load(ctx, t.KV, t.Cluster, pki.EtcdCA, pki.EtcdOPKEClient)
	if err != nil {
		return nil, err
	}
	m, err := etcdMembersVia(ctx, h, t, b, "")
	if err != nil {
		return nil, err
	}
	defer m.close()
	list, err := listMembers(ctx, m.cli)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, x := range list.members {
		if x.Name != "" {
			out[x.Name] = list.answers[x.ID]
		}
	}
	return out, nil
}

// asAdmin reaches the cluster's API through the gateway with the admin
// credentials of its PKI, from the first controller whose API server
// answers; close it when done.
func (h *HostSessions) asAdmin(ctx context.Context, t HostTarget) (*apiAt, error) {
	b, err := pki.Load(ctx, t.KV, t.Cluster, pki.CA, pki.Admin)
	if err != nil {
		return nil, err
	}
	return &apiAt{h: h, t: t, b: b}, nil
}
