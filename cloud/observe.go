package cloud

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	jsoniter "github.com/json-iterator/go"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/pagination"

	"opke.dev/opke/diff"
	"opke.dev/opke/schemas"
)

// MetaUserData is the server metadata key holding the sha256 of the
// server's user_data: Nova does not show user_data to its owner.
const MetaUserData = "opke-user-data"

// pageSize is the page OPKE asks for; larger listings take more pages.
var pageSize = 1000

// Tag returns the tag key=value OPKE puts on resources.
func Tag(key, value string) string { return key + "=" + value }

// Observation is what a cloud holds for OPKE, by cluster.
type Observation struct {
	Clusters map[string][]diff.Resource
	// Members resolves load balancer member ids to the members, for the
	// next observation (the state store keeps it).
	Members map[string]diff.Resource
}

// Observe lists what OPKE owns in the cloud (resources tagged
// opke-owner=owner), each type once. known resolves member ids from a
// previous observation; nil costs a call per pool.
func Observe(ctx context.Context, c *Clients, owner string, known map[string]diff.Resource) (*Observation, error) {
	return ObserveCluster(ctx, c, owner, "", known)
}

// ObserveCluster lists what OPKE owns of one cluster (of all, if cluster
// is empty): the listings are filtered by its tag as well, so their cost
// does not grow with the fleet (the untagged server groups and health
// monitors aside). Each kind is listed by its own observe, in
// observeOrder.
func ObserveCluster(ctx context.Context, c *Clients, owner, cluster string, known map[string]diff.Resource) (*Observation, error) {
	return observe(ctx, c, owner, cluster, nil, known)
}

// ObserveShare lists what OPKE owns of the clusters share holds (a
// daemon's share of a fleet): each kind is listed once for the whole
// fleet, but only the share's resources are kept, and only its pools'
// members are looked up.
func ObserveShare(ctx context.Context, c *Clients, owner string, share func(cluster string) bool, known map[string]diff.Resource) (*Observation, error) {
	return observe(ctx, c, owner, "", share, known)
}

func observe(ctx context.Context, c *Clients, owner, cluster string, share func(string) bool, known map[string]diff.Resource) (*Observation, error) {
	o := &observer{c: c, owner: owner, only: cluster, share: share, tags: []string{Tag(schemas.TagOwner, owner)}, known: known,
		out:   &Observation{Clusters: map[string][]diff.Resource{}, Members: map[string]diff.Resource{}},
		names: map[string]string{}, cluster: map[string]string{}}
	if cluster != "" {
		o.tags = append(o.tags, Tag(schemas.TagCluster, cluster))
	}
	for _, k := range observeOrder {
		if err := kinds[k].observe(o, ctx); err != nil {
			return nil, err
		}
	}
	for _, rs := range o.out.Clusters {
		slices.SortFunc(rs, func(a, b diff.Resource) int { return a.Address().Compare(b.Address()) })
	}
	return o.out, nil
}

type observer struct {
	c     *Clients
	owner string
	// only is the one cluster observed, if set; tags are the tags every
	// listing filters by (all of them).
	only string
	// share, if set, holds the clusters observed.
	share func(cluster string) bool
	tags  []string
	out   *Observation
	// known resolves member ids from a previous observation.
	known   map[string]diff.Resource
	names   map[string]string // id -> name, for references
	cluster map[string]string // id -> cluster
	// what later steps look up
	portOfDevice map[string]string // server or lb id -> port name
	vipPort      map[string]string // port id -> load balancer name
}

// clusterOf reads the opke-cluster tag.
func clusterOf(tags []string) string {
	for _, t := range tags {
		if v, ok := strings.CutPrefix(t, schemas.TagCluster+"="); ok {
			return v
		}
	}
	return ""
}

// tagFilter is the tags filter of Nova's and Neutron's listings.
func (o *observer) tagFilter() string { return strings.Join(o.tags, ",") }

func (o *observer) add(cluster string, r diff.Resource) {
	if !o.observes(cluster) {
		return
	}
	o.names[r.ID] = r.Name
	o.cluster[r.ID] = cluster
	o.out.Clusters[cluster] = append(o.out.Clusters[cluster], r)
}

// observes tells whether the cluster's resources are observed.
func (o *observer) observes(cluster string) bool {
	return cluster != "" && (o.only == "" || cluster == o.only) && (o.share == nil || o.share(cluster))
}

// list pages through the listing at url, whose pages hold the items
// under key and the next page's link under key+"_links" (Nova, Neutron,
// Octavia), and gives fn each page's items decoded into T, in one pass
// over the body as it streams in. gophercloud's pagers decode a page into
// interface{}, then its Extract functions encode it and decode it again
// (and its resource types decode each item twice more for their times):
// at fleet scale those passes over the servers, ports and security groups
// were most of a plan's time.
func list[T any](ctx context.Context, what string, client *gophercloud.ServiceClient, url, key string, fn func([]T)) error {
	for url != "" {
		items, next, err := page[T](ctx, client, url, key)
		if err != nil {
			return fmt.Errorf("list %s: %w", what, err)
		}
		fn(items)
		url = ""
		if len(items) > 0 {
			url = next
		}
	}
	return nil
}

// page reads one page of a listing: its items under key, and the link to
// the next page, if any, under key+"_links"; anything else is skipped.
func page[T any](ctx context.Context, client *gophercloud.ServiceClient, url, key string) (items []T, next string, err error) {
	resp, err := client.Request(ctx, http.MethodGet, url, &gophercloud.RequestOpts{OkCodes: []int{http.StatusOK}, KeepResponseBody: true,
		MoreHeaders: map[string]string{"Accept": "application/json"}})
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	return decodePage[T](resp.Body, key)
}

// decodePage decodes a listing's page as it streams in, with the decoder
// Kubernetes' apimachinery long used (json-iterator, compatible with
// encoding/json): it took a fifth off a 1,000-cluster plan, whose
// listings' decoding was most of OPKE's own share of the time.
func decodePage[T any](body io.Reader, key string) (items []T, next string, err error) {
	iter := jsoniter.Parse(jsoniter.ConfigCompatibleWithStandardLibrary, body, 64<<10)
	if iter.WhatIsNext() != jsoniter.ObjectValue {
		return nil, "", fmt.Errorf("a page that is not a JSON object (%v)", iter.Error)
	}
	// ReadObjectCB, not ReadObject, which ends an object at a key "".
	iter.ReadObjectCB(func(iter *jsoniter.Iterator, name string) bool {
		switch name {
		case key:
			iter.ReadVal(&items)
		case key + "_links":
			var links []struct {
				Href string `json:"href"`
				Rel  string `json:"rel"`
			}
			iter.ReadVal(&links)
			for _, l := range links {
				if l.Rel == "next" {
					next = l.Href
				}
			}
		default:
			iter.Skip()
		}
		return iter.Error == nil
	})
	if iter.Error != nil && !errors.Is(iter.Error, io.EOF) {
		return nil, "", fmt.Errorf("a page: %w", iter.Error)
	}
	return items, next, nil
}

// listByOffset pages through a listing that has no links but takes an
// offset, as Nova's server groups: each page holds at most the cloud's
// max_limit items (1000 by default, the operator's to lower), which the
// client cannot know, so the listing ends at an empty page, not at a
// short one (gophercloud reads one page, the first max_limit groups).
func listByOffset[T any](ctx context.Context, what string, client *gophercloud.ServiceClient, url, key string, fn func([]T)) error {
	for offset := 0; ; {
		items, _, err := page[T](ctx, client, fmt.Sprintf("%s?limit=%d&offset=%d", url, pageSize, offset), key)
		if err != nil {
			return fmt.Errorf("list %s: %w", what, err)
		}
		if len(items) == 0 {
			return nil
		}
		fn(items)
		offset += len(items)
	}
}

// listOf is list with the listing's gophercloud options.
func listOf[T any](ctx context.Context, what string, client *gophercloud.ServiceClient, url string, opts any, key string, fn func([]T)) error {
	q, err := query(opts)
	if err != nil {
		return fmt.Errorf("list %s: %w", what, err)
	}
	return list(ctx, what, client, url+q, key, fn)
}

// query is a listing's query string from its gophercloud options.
func query(opts any) (string, error) {
	q, err := gophercloud.BuildQueryString(opts)
	if err != nil {
		return "", err
	}
	return q.String(), nil
}

// each pages through a listing.
func each(ctx context.Context, what string, p pagination.Pager, fn func(pagination.Page) error) error {
	err := p.EachPage(ctx, func(_ context.Context, page pagination.Page) (bool, error) {
		return true, fn(page)
	})
	if err != nil {
		return fmt.Errorf("list %s: %w", what, err)
	}
	return nil
}
