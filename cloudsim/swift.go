package cloudsim

import (
	"crypto/md5" //nolint:gosec // Swift's ETag is an MD5, by protocol
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

type account struct {
	Containers map[string]*container `json:"containers"`
}

type container struct {
	Created time.Time          `json:"created"`
	Objects map[string]*object `json:"objects"`
}

type object struct {
	Data        []byte    `json:"data"`
	ETag        string    `json:"etag"`
	ContentType string    `json:"content_type"`
	Modified    time.Time `json:"modified"`
	Meta        map[string]string
}

const swiftPrefix = "/object-store/v1/"

// swiftHandler routes /object-store/v1/{account}[/{container}[/{object}]]
// by hand: an object's name is everything after the container, slashes
// included.
func (s *Sim) swiftHandler() http.HandlerFunc {
	routes := map[string]http.HandlerFunc{}
	add := func(method, level string, h handlerFunc) {
		pattern := method + " " + swiftPrefix + map[string]string{"account": "{account}",
			"container": "{account}/{container}", "object": "{account}/{container}/{object...}"}[level]
		routes[method+" "+level] = s.wrap(pattern, true, h)
	}
	add("GET", "account", s.swiftAccount)
	add("HEAD", "account", s.swiftAccount)
	add("PUT", "container", s.swiftPutContainer)
	add("POST", "container", s.swiftPostContainer)
	add("GET", "container", s.swiftListObjects)
	add("HEAD", "container", s.swiftListObjects)
	add("DELETE", "container", s.swiftDeleteContainer)
	add("PUT", "object", s.swiftPutObject)
	add("GET", "object", s.swiftGetObject)
	add("HEAD", "object", s.swiftGetObject)
	add("DELETE", "object", s.swiftDeleteObject)
	return func(rw http.ResponseWriter, r *http.Request) {
		account, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, swiftPrefix), "/")
		container, object, _ := strings.Cut(rest, "/")
		level := "account"
		switch {
		case object != "":
			level = "object"
		case container != "":
			level = "container"
		}
		h := routes[r.Method+" "+level]
		if h == nil || account == "" {
			rw.Header().Set("Allow", "GET, HEAD, PUT, POST, DELETE")
			rw.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		r.SetPathValue("account", account)
		r.SetPathValue("container", container)
		r.SetPathValue("object", object)
		h(rw, r)
	}
}

// swiftAcct returns the account of the path when the caller may use it.
func (r *request) swiftAcct(rw http.ResponseWriter) *account {
	name := r.PathValue("account")
	if name != "AUTH_"+r.tok.ProjectID && !r.tok.admin() {
		swiftError(rw, http.StatusForbidden)
		return nil
	}
	a := r.w.Accounts[name]
	if a == nil {
		a = &account{Containers: map[string]*container{}}
		r.w.Accounts[name] = a
	}
	return a
}

// swiftContainer starts a container or object request: the account, the
// transaction headers, and the container, answering 403 or 404 itself.
func (r *request) swiftContainer(rw http.ResponseWriter) (*account, *container, bool) {
	a := r.swiftAcct(rw)
	if a == nil {
		return nil, nil, false
	}
	transHeaders(rw, r.now)
	c := a.Containers[r.PathValue("container")]
	if c == nil {
		swiftError(rw, http.StatusNotFound)
		return nil, nil, false
	}
	return a, c, true
}

// swiftObject is swiftContainer for an object that must exist.
func (r *request) swiftObject(rw http.ResponseWriter) (*container, *object, bool) {
	_, c, ok := r.swiftContainer(rw)
	if !ok {
		return nil, nil, false
	}
	o := c.Objects[r.PathValue("object")]
	if o == nil {
		swiftError(rw, http.StatusNotFound)
		return nil, nil, false
	}
	return c, o, true
}

func swiftError(rw http.ResponseWriter, code int) {
	body := map[int]string{401: "<html><h1>Unauthorized</h1><p>This server could not verify that you are authorized to access the document you requested.</p></html>",
		403: "<html><h1>Forbidden</h1><p>Access was denied to this resource.</p></html>", 404: "<html><h1>Not Found</h1><p>The resource could not be found.</p></html>",
		409: "<html><h1>Conflict</h1><p>There was a conflict when trying to complete your request.</p></html>"}[code]
	rw.Header().Set("Content-Type", "text/html; charset=UTF-8")
	rw.Header().Set("Content-Length", strconv.Itoa(len(body)))
	rw.WriteHeader(code)
	_, _ = io.WriteString(rw, body)
}

func transHeaders(rw http.ResponseWriter, now time.Time) {
	rw.Header().Set("X-Trans-Id", "tx"+newHex()[:21]+"-"+fmt.Sprintf("%010x", now.Unix()))
	rw.Header().Set("X-Openstack-Request-Id", rw.Header().Get("X-Trans-Id"))
	rw.Header().Set("X-Timestamp", fmt.Sprintf("%d.%05d", now.Unix(), now.Nanosecond()/10000))
}

func wantsJSON(r *request) bool {
	f := r.URL.Query().Get("format")
	return f == "json" || (f == "" && strings.Contains(r.Header.Get("Accept"), "application/json"))
}

// swiftListing writes a listing as JSON or as names, one a line; an empty
// plain listing is 204, as Swift answers.
func swiftListing(rw http.ResponseWriter, r *request, names []string, entries []any) {
	if r.Method == http.MethodHead {
		rw.WriteHeader(http.StatusNoContent)
		return
	}
	if wantsJSON(r) {
		writeJSON(rw, http.StatusOK, orEmpty(entries))
		return
	}
	if len(names) == 0 {
		rw.WriteHeader(http.StatusNoContent)
		return
	}
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(rw, strings.Join(names, "\n")+"\n")
}

// page applies marker, end_marker, prefix and limit to sorted names.
func swiftPage(names []string, q url.Values) []string {
	sort.Strings(names)
	var out []string
	limit := 10000
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n >= 0 && n < limit {
		limit = n
	}
	for _, n := range names {
		if (q.Get("marker") != "" && n <= q.Get("marker")) || (q.Get("end_marker") != "" && n >= q.Get("end_marker")) ||
			!strings.HasPrefix(n, q.Get("prefix")) {
			continue
		}
		if len(out) == limit {
			break
		}
		out = append(out, n)
	}
	return out
}

func (s *Sim) swiftAccount(rw http.ResponseWriter, r *request) {
	a := r.swiftAcct(rw)
	if a == nil {
		return
	}
	transHeaders(rw, r.now)
	var objects, bytes int
	var all []string
	for name, c := range a.Containers {
		all = append(all, name)
		for _, o := range c.Objects {
			objects, bytes = objects+1, bytes+len(o.Data)
		}
	}
	rw.Header().Set("X-Account-Container-Count", strconv.Itoa(len(a.Containers)))
	rw.Header().Set("X-Account-Object-Count", strconv.Itoa(objects))
	rw.Header().Set("X-Account-Bytes-Used", strconv.Itoa(bytes))
	names := swiftPage(all, r.URL.Query())
	var entries []any
	for _, n := range names {
		c := a.Containers[n]
		var size int
		for _, o := range c.Objects {
			size += len(o.Data)
		}
		entries = append(entries, map[string]any{"name": n, "count": len(c.Objects), "bytes": size, "last_modified": c.Created.Format("2006-01-02T15:04:05.000000")})
	}
	swiftListing(rw, r, names, entries)
}

var containerNameRE = regexp.MustCompile(`^[^/]{1,256}$`)

func (s *Sim) swiftPutContainer(rw http.ResponseWriter, r *request) {
	a := r.swiftAcct(rw)
	if a == nil {
		return
	}
	transHeaders(rw, r.now)
	name := r.PathValue("container")
	if !containerNameRE.MatchString(name) {
		swiftError(rw, http.StatusBadRequest)
		return
	}
	if a.Containers[name] != nil {
		rw.WriteHeader(http.StatusAccepted)
		return
	}
	a.Containers[name] = &container{Created: r.now.UTC(), Objects: map[string]*object{}}
	rw.WriteHeader(http.StatusCreated)
}

func (s *Sim) swiftPostContainer(rw http.ResponseWriter, r *request) {
	a := r.swiftAcct(rw)
	if a == nil {
		return
	}
	if a.Containers[r.PathValue("container")] == nil {
		swiftError(rw, http.StatusNotFound)
		return
	}
	rw.WriteHeader(http.StatusNoContent)
}

func (s *Sim) swiftListObjects(rw http.ResponseWriter, r *request) {
	_, c, ok := r.swiftContainer(rw)
	if !ok {
		return
	}
	var all []string
	var bytes int
	for name, o := range c.Objects {
		all, bytes = append(all, name), bytes+len(o.Data)
	}
	rw.Header().Set("X-Container-Object-Count", strconv.Itoa(len(c.Objects)))
	rw.Header().Set("X-Container-Bytes-Used", strconv.Itoa(bytes))
	names := swiftPage(all, r.URL.Query())
	var entries []any
	for _, n := range names {
		o := c.Objects[n]
		entries = append(entries, map[string]any{"name": n, "hash": o.ETag, "bytes": len(o.Data), "content_type": o.ContentType,
			"last_modified": o.Modified.Format("2006-01-02T15:04:05.000000")})
	}
	swiftListing(rw, r, names, entries)
}

func (s *Sim) swiftDeleteContainer(rw http.ResponseWriter, r *request) {
	a, c, ok := r.swiftContainer(rw)
	if !ok {
		return
	}
	switch {
	case len(c.Objects) > 0:
		swiftError(rw, http.StatusConflict)
	default:
		delete(a.Containers, r.PathValue("container"))
		rw.WriteHeader(http.StatusNoContent)
	}
}

func (s *Sim) swiftPutObject(rw http.ResponseWriter, r *request) {
	_, c, ok := r.swiftContainer(rw)
	if !ok {
		return
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		swiftError(rw, http.StatusBadRequest)
		return
	}
	sum := md5.Sum(data) //nolint:gosec // Swift's ETag
	etag := hex.EncodeToString(sum[:])
	if want := strings.Trim(r.Header.Get("ETag"), `"`); want != "" && want != etag {
		rw.WriteHeader(http.StatusUnprocessableEntity)
		return
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		ct = "application/octet-stream"
	}
	meta := map[string]string{}
	for k, v := range r.Header {
		if strings.HasPrefix(k, "X-Object-Meta-") {
			meta[k] = v[0]
		}
	}
	c.Objects[r.PathValue("object")] = &object{Data: data, ETag: etag, ContentType: ct, Modified: r.now.UTC(), Meta: meta}
	rw.Header().Set("ETag", etag)
	rw.Header().Set("Last-Modified", r.now.UTC().Format(http.TimeFormat))
	rw.Header().Set("Content-Length", "0")
	rw.WriteHeader(http.StatusCreated)
}

func (s *Sim) swiftGetObject(rw http.ResponseWriter, r *request) {
	_, o, ok := r.swiftObject(rw)
	if !ok {
		return
	}
	h := rw.Header()
	h.Set("ETag", o.ETag)
	h.Set("Content-Type", o.ContentType)
	h.Set("Content-Length", strconv.Itoa(len(o.Data)))
	h.Set("Last-Modified", o.Modified.Format(http.TimeFormat))
	h.Set("Accept-Ranges", "bytes")
	for k, v := range o.Meta {
		h.Set(k, v)
	}
	rw.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = rw.Write(o.Data)
	}
}

func (s *Sim) swiftDeleteObject(rw http.ResponseWriter, r *request) {
	c, _, ok := r.swiftObject(rw)
	if !ok {
		return
	}
	delete(c.Objects, r.PathValue("object"))
	rw.WriteHeader(http.StatusNoContent)
}
