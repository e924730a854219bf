package cloudsim

import (
	"net/http"
	"net/url"
	"strconv"
)

// maxPage is the largest page any list returns, as OpenStack's services cap them.
const maxPage = 1000

// parseLimit reads a limit query value; errf answers a bad one.
func parseLimit(rw http.ResponseWriter, v string, errf func(http.ResponseWriter, int, string)) (int, bool) {
	if v == "" {
		return maxPage, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		errf(rw, http.StatusBadRequest, "Bad limit value "+v+": must be a non-negative integer")
		return 0, false
	}
	return min(max(n, 1), maxPage), true
}

// paginate returns the page of items after marker (by id) of at most limit
// items, and whether more may follow. ok is false for an unknown marker.
func paginate[T any](items []T, marker string, limit int, id func(T) string) (page []T, more, ok bool) {
	start := 0
	if marker != "" {
		start = -1
		for i, it := range items {
			if id(it) == marker {
				start = i + 1
				break
			}
		}
		if start < 0 {
			return nil, false, false
		}
	}
	rest := items[start:]
	if len(rest) > limit {
		return rest[:limit], true, true
	}
	return rest, false, true
}

// nextHref is the link to the page after marker, keeping the other query values.
func nextHref(base string, u *url.URL, marker string) string {
	q := u.Query()
	q.Set("marker", marker)
	return base + u.Path + "?" + q.Encode()
}
