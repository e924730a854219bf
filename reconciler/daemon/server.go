package daemon

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"opke.dev/opke/backup"
	"opke.dev/opke/diff"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/reconciler/source"
	"opke.dev/opke/state"
)

// maxHookBody bounds a webhook's body: forges send a few hundred KiB at most.
const maxHookBody = 4 << 20

// maxHooksReading bounds the webhook bodies read at once (each up to
// maxHookBody): a flood of signed-looking requests holds 16 MiB at most.
const maxHooksReading = 4

// Handler serves the daemon's HTTP endpoints: the status page (/), a
// plan's page (/plans/<commit>/<cluster>), the JSON API (/api/v1/...),
// the webhook (POST /hooks/git), /metrics, /healthz and /readyz. Every
// replica serves them from the state store; only the leader acts on a
// webhook. webhookSecret "" disables the webhook.
func (d *Daemon) Handler(webhookSecret string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", d.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.cfg.Metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /hooks/git", d.webhook(webhookSecret))
	mux.HandleFunc("GET /api/v1/clusters", d.apiClusters)
	mux.HandleFunc("GET /api/v1/clusters/{name}", d.apiCluster)
	mux.HandleFunc("GET /api/v1/plans/{commit}/{cluster}", d.apiPlan)
	mux.HandleFunc("GET /api/v1/commits/{commit}", d.apiCommit)
	mux.HandleFunc("GET /plans/{commit}/{cluster}", d.planPage)
	mux.HandleFunc("GET /commits/{commit}", d.commitPage)
	mux.HandleFunc("GET /clusters/{name}", d.clusterPage)
	mux.HandleFunc("GET /{$}", d.statusPage)
	return securityHeaders(mux)
}

func (d *Daemon) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	_, err := d.cfg.Store.Current(ctx)
	h := d.Health()
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "error": "state store: " + err.Error(), "health": h})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ready": true, "health": h})
}

// webhook triggers a sync on a push from a forge that proves it knows the
// secret: GitHub's and Gitea's X-Hub-Signature-256 (HMAC-SHA256 of the
// body), or GitLab's X-Gitlab-Token. Anything else is 401 and triggers
// nothing. The headers are checked before any of the body is read: a
// request without a well-formed signature, with a wrong GitLab token or
// announcing a body past maxHookBody is refused unread, and at most
// maxHooksReading bodies are read at once.
func (d *Daemon) webhook(secret string) http.HandlerFunc {
	reading := make(chan struct{}, maxHooksReading)
	return func(w http.ResponseWriter, r *http.Request) {
		if secret == "" {
			http.Error(w, "the webhook is disabled: no secret is configured", http.StatusNotFound)
			return
		}
		if !plausibleWebhook(secret, r.Header) {
			d.log.Warn("webhook refused: bad or missing signature", "remote", r.RemoteAddr)
			http.Error(w, "bad or missing signature", http.StatusUnauthorized)
			return
		}
		if r.ContentLength > maxHookBody {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		select {
		case reading <- struct{}{}:
			defer func() { <-reading }()
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many webhooks at once", http.StatusServiceUnavailable)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxHookBody))
		if err != nil {
			http.Error(w, "body too large or cut short", http.StatusRequestEntityTooLarge)
			return
		}
		if !verifyWebhook(secret, r.Header, body) {
			d.log.Warn("webhook refused: bad or missing signature", "remote", r.RemoteAddr)
			http.Error(w, "bad or missing signature", http.StatusUnauthorized)
			return
		}
		push, _ := parsePush(body)
		d.log.Info("webhook: sync now", "ref", push.Ref, "after", push.After)
		d.Trigger()
		w.WriteHeader(http.StatusAccepted)
	}
}

// plausibleWebhook checks what the headers alone can say: an HMAC header
// of the right form (sha256= and 64 hex digits), or the right GitLab
// token (in constant time).
func plausibleWebhook(secret string, h http.Header) bool {
	if sig, ok := strings.CutPrefix(h.Get("X-Hub-Signature-256"), "sha256="); ok {
		_, err := hex.DecodeString(sig)
		return err == nil && len(sig) == 2*sha256.Size
	}
	if tok := h.Get("X-Gitlab-Token"); tok != "" {
		return subtle.ConstantTimeCompare([]byte(tok), []byte(secret)) == 1
	}
	return false
}

// verifyWebhook checks a webhook's proof of the secret, in constant time:
// what the headers say (plausibleWebhook), then an HMAC header against
// the body.
func verifyWebhook(secret string, h http.Header, body []byte) bool {
	if !plausibleWebhook(secret, h) {
		return false
	}
	sig, ok := strings.CutPrefix(h.Get("X-Hub-Signature-256"), "sha256=")
	if !ok {
		return true // GitLab's token, checked
	}
	got, _ := hex.DecodeString(sig) // well-formed: plausibleWebhook
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// pushEvent is what the daemon reads of a forge's push event (GitHub, Gitea
// and GitLab share these fields); it is logged, never trusted: the sync
// asks the remote itself.
type pushEvent struct {
	Ref   string `json:"ref"`
	After string `json:"after"`
}

// ErrPayload is a webhook body that is not a push event's JSON.
var ErrPayload = errors.New("not a push event")

// parsePush reads a push event's ref and new commit.
func parsePush(body []byte) (pushEvent, error) {
	var p pushEvent
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&p); err != nil {
		return pushEvent{}, errors.Join(ErrPayload, err)
	}
	if len(p.Ref) > 1024 || len(p.After) > 64 {
		return pushEvent{}, ErrPayload
	}
	return p, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Clusters lists every cluster's status, by name.
func (d *Daemon) Clusters(ctx context.Context) ([]ClusterStatus, error) {
	prefix := state.KeysOf(d.cfg.Store).Statuses()
	raw, err := d.cfg.Store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := []ClusterStatus{}
	for _, v := range raw {
		var s ClusterStatus
		if json.Unmarshal(v, &s) == nil {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b ClusterStatus) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (d *Daemon) apiClusters(w http.ResponseWriter, r *http.Request) {
	cs, err := d.Clusters(r.Context())
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"clusters": cs, "daemon": d.Health()})
}

func (d *Daemon) apiCluster(w http.ResponseWriter, r *http.Request) {
	data, err := d.cfg.Store.Get(r.Context(), state.KeysOf(d.cfg.Store).Status(r.PathValue("name")))
	if errors.Is(err, state.ErrNotFound) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such cluster"})
		return
	}
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}

// noteFor reads a commit's note, answering 404 or 503 itself when it
// cannot.
func (d *Daemon) noteFor(w http.ResponseWriter, r *http.Request) *report.Note {
	commit := r.PathValue("commit")
	if len(commit) != 40 || strings.Trim(commit, "0123456789abcdef") != "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "a commit is 40 hex digits"})
		return nil
	}
	n, err := d.Note(r.Context(), commit)
	if errors.Is(err, state.ErrNotFound) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "OPKE has not seen this commit"})
		return nil
	}
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return nil
	}
	return n
}

func (d *Daemon) apiCommit(w http.ResponseWriter, r *http.Request) {
	if n := d.noteFor(w, r); n != nil {
		writeJSON(w, http.StatusOK, n)
	}
}

func (d *Daemon) apiPlan(w http.ResponseWriter, r *http.Request) {
	n := d.noteFor(w, r)
	if n == nil {
		return
	}
	c, ok := n.Clusters[r.PathValue("cluster")]
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "the commit does not concern this cluster"})
		return
	}
	writeJSON(w, http.StatusOK, c)
}

//go:embed pages.html
var pagesHTML string

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"short": func(s string) string { return s[:min(len(s), 12)] },
	"stamp": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05 MST")
	},
	"ago":   ago,
	"took":  func(from, to time.Time) string { return to.Sub(from).Round(100 * time.Millisecond).String() },
	"inc":   func(i int) int { return i + 1 },
	"bytes": backup.FormatSize,
}).Parse(pagesHTML))

// refreshSeconds is how often the fleet's and a cluster's pages reload.
const refreshSeconds = 5

// page is what the pages are rendered from: the head's title and refresh,
// the time the page is of, and each page's own.
type page struct {
	Title   string
	Refresh int
	Now     time.Time
	// The fleet's page.
	Health   Health
	Clusters []ClusterStatus
	// A cluster's page.
	Status  ClusterStatus
	Head    *source.CommitInfo
	Commit  *entryView
	History []historyEntry
	Backups []*backup.Record
	// A commit's page.
	Note *report.Note
	Info *source.CommitInfo
	// A plan's page: the cluster and the commit, whose entry is Commit.
	Name, CommitID string
	// The drift check after the commit, if one changed something (a
	// cluster's page and a plan's).
	Drift *entryView
}

// historyEntry is a commit of the tracked branch as a cluster's page
// lists it: what OPKE did of it for the cluster.
type historyEntry struct {
	Commit string
	Info   *source.CommitInfo
	Entry  *report.Cluster
}

// historyLength is how many of the branch's recent commits a cluster's
// page looks at, and historyShown how many of those concerning the
// cluster it lists.
const historyLength, historyShown = 30, 10

// history is what the tracked branch's recent commits did for cluster,
// newest first, from head back: each commit's entry for the cluster
// alone is read (a commit that did not concern it has none).
func (d *Daemon) history(ctx context.Context, cluster, head string) []historyEntry {
	if head == "" {
		return nil
	}
	commits, err := d.cfg.Source.Log(head, historyLength)
	if err != nil {
		return nil
	}
	var out []historyEntry
	for _, c := range commits {
		if len(out) == historyShown {
			break
		}
		entry, err := ReadNoteEntry(ctx, d.cfg.Store, c, cluster)
		if err != nil {
			continue
		}
		h := historyEntry{Commit: c, Entry: entry}
		if info, err := d.cfg.Source.Commit(c); err == nil {
			h.Info = &info
		}
		out = append(out, h)
	}
	return out
}

// entryView is a cluster's entry in a note as a page shows it: its plan
// as text, and the drift check that followed the commit, if one did.
type entryView struct {
	Entry *report.Cluster
	Plan  string
	Now   time.Time
	Drift *entryView
}

// viewOf is the view of a note's entry; nil for none.
func viewOf(c *report.Cluster, now time.Time) *entryView {
	if c == nil {
		return nil
	}
	v := &entryView{Entry: c, Plan: planText(c.Plan), Now: now}
	if c.Drift != nil {
		// The entry's state and summary are the drift check's; its plan
		// and steps the commit's.
		commit := *c
		commit.Drift, commit.State, commit.Summary = nil, report.Success, "the commit's apply: "+report.PlanSummary(c.Plan)
		for _, st := range c.Steps {
			if st.Error != "" {
				commit.State = report.Failure
			}
		}
		v.Entry = &commit
		v.Drift = viewOf(c.Drift, now)
	}
	return v
}

// planText is a plan as `opke plan` prints it; "" for none.
func planText(p *diff.Plan) string {
	if p == nil {
		return ""
	}
	data, err := json.Marshal(p)
	var b strings.Builder
	if err != nil || diff.Text(&b, data) != nil {
		return ""
	}
	return b.String()
}

// ago says how long before now t was, as people read it; "never" for
// the zero time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%d s ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h %d min ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return t.UTC().Format("2006-01-02 15:04 MST")
}

func (d *Daemon) statusPage(w http.ResponseWriter, r *http.Request) {
	cs, err := d.Clusters(r.Context())
	if err != nil {
		http.Error(w, "state store: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	render(w, "status", &page{Title: "Fleet", Refresh: refreshSeconds, Now: d.now(), Clusters: cs, Health: d.Health()})
}

// clusterPage is a cluster's page: its status, its hosts, the head
// commit's plan and steps, the last drift check's (a repair's steps are
// its own), and its backups.
func (d *Daemon) clusterPage(w http.ResponseWriter, r *http.Request) {
	ctx, name := r.Context(), r.PathValue("name")
	raw, err := d.cfg.Store.Get(ctx, state.KeysOf(d.cfg.Store).Status(name))
	if errors.Is(err, state.ErrNotFound) {
		http.Error(w, "no such cluster", http.StatusNotFound)
		return
	}
	var st ClusterStatus
	if err == nil {
		err = json.Unmarshal(raw, &st)
	}
	if err != nil {
		http.Error(w, "state store: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	p := &page{Title: name, Refresh: refreshSeconds, Now: d.now(), Status: st}
	if st.Commit != "" {
		if info, err := d.cfg.Source.Commit(st.Commit); err == nil {
			p.Head = &info
		}
		if entry, err := ReadNoteEntry(ctx, d.cfg.Store, st.Commit, name); err == nil {
			p.Commit = viewOf(entry, p.Now)
			p.Drift = p.Commit.Drift
		}
	}
	p.History = d.history(ctx, name, st.Commit)
	if p.Backups, err = reconciler.Backups(ctx, d.cfg.Store, name); err != nil {
		http.Error(w, "state store: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	slices.Reverse(p.Backups) // the newest first
	render(w, "cluster", p)
}

func (d *Daemon) planPage(w http.ResponseWriter, r *http.Request) {
	n := d.noteFor(w, r)
	if n == nil {
		return
	}
	name := r.PathValue("cluster")
	c, ok := n.Clusters[name]
	if !ok {
		http.Error(w, "the commit does not concern this cluster", http.StatusNotFound)
		return
	}
	v := viewOf(c, d.now())
	render(w, "plan", &page{Title: name + " at " + n.Commit[:12], Now: v.Now, Name: name, CommitID: n.Commit, Commit: v, Drift: v.Drift})
}

func (d *Daemon) commitPage(w http.ResponseWriter, r *http.Request) {
	n := d.noteFor(w, r)
	if n == nil {
		return
	}
	p := &page{Title: "Commit " + n.Commit[:12], Now: d.now(), Note: n}
	if info, err := d.cfg.Source.Commit(n.Commit); err == nil {
		p.Info = &info
	}
	render(w, "commit", p)
}

// render writes a page; a template that fails is the code's fault, and
// says so rather than send half a page.
func render(w http.ResponseWriter, name string, p *page) {
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, p); err != nil {
		http.Error(w, "render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// now is the time the pages are of: the planner's clock, which tests move.
func (d *Daemon) now() time.Time {
	if d.cfg.Planner != nil && d.cfg.Planner.Now != nil {
		return d.cfg.Planner.Now()
	}
	return time.Now()
}

// today is the day upstream's support of each minor is judged at
// (Config.Today, else now).
func (d *Daemon) today() time.Time {
	if d.cfg.Today != nil {
		return d.cfg.Today()
	}
	return d.now()
}
