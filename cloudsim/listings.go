package cloudsim

import (
	"net/url"
	"strconv"
)

// changed marks the world changed: it is saved at the next flush, and
// the listings kept for their next pages are forgotten. The caller holds
// s.mu.
func (s *Sim) changed() {
	s.dirty = true
	s.gen++
}

// listings keeps the sorted matches of the listings served since the
// world last changed, for their next pages. A real cloud answers a page
// from an index (the marker is a WHERE id > ... on a sorted index); a
// simulator that filtered and sorted every resource again for each page
// made a whole listing quadratic in the fleet (70 pages of 70,000
// servers at 10,000 clusters, tens of seconds of the simulator's CPU per
// listing, where a real Nova answers in well under one).
type listings struct {
	gen     uint64
	matches map[string]any
}

// maxListings bounds the listings kept between two changes.
const maxListings = 64

// listingKey names a listing: the route, who asks (what they see), and
// the query but for the page's marker and size.
func listingKey(route string, r *request, extra ...string) string {
	q := url.Values{}
	for k, v := range r.URL.Query() {
		if k != "marker" && k != "limit" {
			q[k] = v
		}
	}
	key := route + "|" + r.tok.ProjectID + "|" + strconv.FormatBool(r.tok.admin()) + "|" + q.Encode()
	for _, e := range extra {
		key += "|" + e
	}
	return key
}

// matchesOf returns the listing key's sorted matches, made with compute
// unless they are kept from an earlier page at the world's generation.
// The caller holds s.mu.
func matchesOf[T any](s *Sim, key string, compute func() []T) []T {
	l := &s.listings
	if l.gen != s.gen || l.matches == nil || len(l.matches) >= maxListings {
		l.gen, l.matches = s.gen, map[string]any{}
	}
	if m, ok := l.matches[key].([]T); ok {
		return m
	}
	m := compute()
	l.matches[key] = m
	return m
}
