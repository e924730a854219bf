package daemon

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"html/template"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"opke.dev/opke/backup"
	"opke.dev/opke/diff"
	"opke.dev/opke/reconciler/report"
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

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"short": func(s string) string { return s[:min(len(s), 12)] },
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format(time.RFC3339)
	},
	"bytes": backup.FormatSize,
}).Parse(`
{{define "head"}}<!doctype html><html><head><meta charset="utf-8"><title>{{.}} · OPKE</title>
<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:72em}table{border-collapse:collapse}
td,th{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
.success{color:#17692c}.failure,.error{color:#b0201b}.pending{color:#8a6100}pre{background:#f6f6f6;padding:1em;overflow:auto}</style>
</head><body>{{end}}
{{define "status"}}{{template "head" "Fleet"}}<h1>OPKE fleet</h1>
<p>This daemon ({{.Health.ID}}) {{if .Health.Leader}}<b>leads</b> (takes the commits in){{else}}does not lead{{end}};
{{with .Health.Members}}{{len .}} daemon(s) share the fleet, this one applies {{$.Health.Share}} cluster(s).{{else}}it is not sharing the fleet now.{{end}}
Tracked head: {{if .Health.Head}}<a href="/commits/{{.Health.Head}}">{{short .Health.Head}}</a>{{else}}none yet{{end}};
last sync {{when .Health.LastSync}}{{if .Health.SyncError}}, <span class="error">sync error: {{.Health.SyncError}}</span>{{end}}.</p>
<table><tr><th>Cluster</th><th>State</th><th>Commit</th><th>Summary</th><th>Drift</th><th>Last resync</th><th>Rollout</th><th>Last backup</th></tr>
{{range .Clusters}}<tr><td>{{.Name}}{{if .Paused}} (paused){{end}}{{if .Daemon}}<br><small>by {{.Daemon}}</small>{{end}}</td><td class="{{.State}}">{{.State}}</td>
<td><a href="/plans/{{.Commit}}/{{.Name}}">{{short .Commit}}</a></td><td>{{.Summary}}{{if .Retrying}} <span class="error">(retrying: {{.Retrying}})</span>{{end}}</td><td>{{.Drift}}</td><td>{{when .LastResync}}{{if .ResyncError}} <span class="error">(could not look: {{.ResyncError}})</span>{{end}}{{if .ResyncWarnings}} <span class="error">({{.ResyncWarnings}})</span>{{end}}</td>
<td>{{with .Rollout}}{{.Done}}/{{len .Hosts}} at {{.Version}}{{if .Halted}} <span class="error">halted: {{.Halted}}</span>{{end}}<br><small>{{range .Hosts}}{{.Name}} {{.Version}}; {{end}}</small>{{end}}</td>
<td>{{with .LastBackup}}{{when .Taken}}, {{bytes .Size}}{{if .Drill}}, drill {{.Drill}}{{end}}{{else}}-{{end}}</td></tr>
{{else}}<tr><td colspan="6">No cluster yet.</td></tr>{{end}}</table>
<p><a href="/api/v1/clusters">JSON</a> · <a href="/metrics">metrics</a></p></body></html>{{end}}
{{define "plan"}}{{template "head" .Name}}<h1>{{.Name}} at {{short .Commit}}</h1>
<p><a href="/">fleet</a> · <a href="/commits/{{.Commit}}">commit</a> · <a href="/api/v1/plans/{{.Commit}}/{{.Name}}">JSON</a></p>
<p class="{{.Cluster.State}}"><b>{{.Cluster.State}}</b>: {{.Cluster.Summary}}</p>
{{if .Plan}}<h2>Plan</h2><pre>{{.Plan}}</pre>{{end}}
{{if .Cluster.Steps}}<h2>Steps</h2><table><tr><th>Address</th><th>Action</th><th>State</th><th>Seconds</th><th>Error</th></tr>
{{range .Cluster.Steps}}<tr><td>{{.Address}}</td><td>{{.Action}}</td><td>{{.State}}</td><td>{{printf "%.1f" .Seconds}}</td><td>{{.Error}}</td></tr>{{end}}</table>{{end}}
</body></html>{{end}}
{{define "commit"}}{{template "head" (short .Commit)}}<h1>Commit {{short .Commit}} ({{.Ref}})</h1>
<p><a href="/">fleet</a></p><p class="{{.State}}"><b>{{.State}}</b>{{if .Message}}: {{.Message}}{{end}}</p>
<table><tr><th>Cluster</th><th>State</th><th>Summary</th></tr>{{$c := .Commit}}
{{range $name, $cl := .Clusters}}<tr><td><a href="/plans/{{$c}}/{{$name}}">{{$name}}</a></td><td class="{{$cl.State}}">{{$cl.State}}</td><td>{{$cl.Summary}}</td></tr>{{end}}</table>
{{if .Findings}}<h2>Findings</h2><ul>{{range .Findings}}<li>{{.}}</li>{{end}}</ul>{{end}}
</body></html>{{end}}
`))

func (d *Daemon) statusPage(w http.ResponseWriter, r *http.Request) {
	cs, err := d.Clusters(r.Context())
	if err != nil {
		http.Error(w, "state store: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = pages.ExecuteTemplate(w, "status", map[string]any{"Clusters": cs, "Health": d.Health()})
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
	var text string
	if c.Plan != nil {
		data, err := json.Marshal(c.Plan)
		var b strings.Builder
		if err == nil && diff.Text(&b, data) == nil {
			text = b.String()
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = pages.ExecuteTemplate(w, "plan", map[string]any{"Name": name, "Commit": n.Commit, "Cluster": c, "Plan": text})
}

func (d *Daemon) commitPage(w http.ResponseWriter, r *http.Request) {
	if n := d.noteFor(w, r); n != nil {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = pages.ExecuteTemplate(w, "commit", n)
	}
}
