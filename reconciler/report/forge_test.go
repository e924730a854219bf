package report_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/schemas"
)

const commit = "0123456789abcdef0123456789abcdef01234567"

// request is what a forge received.
type request struct {
	Method, Path string
	Header       map[string]string
	Body         map[string]string
}

// forgeServer records the requests a forge API receives.
func forgeServer(t *testing.T, status int) (*httptest.Server, func() []request) {
	t.Helper()
	var mu sync.Mutex
	var got []request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]string
		if err := json.Unmarshal(b, &body); err != nil {
			t.Errorf("body %q: %v", b, err)
		}
		h := map[string]string{}
		for _, k := range []string{"Authorization", "Accept", "X-Github-Api-Version", "Private-Token", "Content-Type"} {
			if v := r.Header.Get(k); v != "" {
				h[k] = v
			}
		}
		mu.Lock()
		got = append(got, request{Method: r.Method, Path: r.URL.EscapedPath(), Header: h, Body: body})
		mu.Unlock()
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"message":"Validation Failed"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []request {
		mu.Lock()
		defer mu.Unlock()
		return append([]request(nil), got...)
	}
}

func note() *report.Note {
	return &report.Note{Commit: commit, Ref: "refs/heads/main", Clusters: map[string]*report.Cluster{
		"demo": {State: report.Success, Summary: "3 create, 1 upload"},
		"prod": {State: report.Failure, Summary: strings.Repeat("x", 200)},
	}}
}

// TestForgeRequests: each forge gets the request its API documents: path,
// auth header, JSON fields, states in its words, descriptions within 140
// characters, a link to the daemon's plan page.
func TestForgeRequests(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 139) + "…"
	tests := []struct {
		name, kind, api, repo string
		want                  []request
	}{
		{name: "github", kind: report.GitHub, repo: "acme/fleet", want: []request{
			{Method: "POST", Path: "/repos/acme/fleet/statuses/" + commit,
				Header: map[string]string{"Authorization": "Bearer s3cret", "Accept": "application/vnd.github+json", "X-Github-Api-Version": "2022-11-28", "Content-Type": "application/json"},
				Body:   map[string]string{"state": "success", "context": "opke/demo", "description": "3 create, 1 upload", "target_url": "https://opke.example/plans/" + commit + "/demo"}},
			{Method: "POST", Path: "/repos/acme/fleet/statuses/" + commit,
				Header: map[string]string{"Authorization": "Bearer s3cret", "Accept": "application/vnd.github+json", "X-Github-Api-Version": "2022-11-28", "Content-Type": "application/json"},
				Body:   map[string]string{"state": "failure", "context": "opke/prod", "description": long, "target_url": "https://opke.example/plans/" + commit + "/prod"}},
		}},
		{name: "gitea", kind: report.Gitea, api: "/api/v1", repo: "acme/fleet", want: []request{
			{Method: "POST", Path: "/api/v1/repos/acme/fleet/statuses/" + commit,
				Header: map[string]string{"Authorization": "token s3cret", "Content-Type": "application/json"},
				Body:   map[string]string{"state": "success", "context": "opke/demo", "description": "3 create, 1 upload", "target_url": "https://opke.example/plans/" + commit + "/demo"}},
			{Method: "POST", Path: "/api/v1/repos/acme/fleet/statuses/" + commit,
				Header: map[string]string{"Authorization": "token s3cret", "Content-Type": "application/json"},
				Body:   map[string]string{"state": "failure", "context": "opke/prod", "description": long, "target_url": "https://opke.example/plans/" + commit + "/prod"}},
		}},
		{name: "gitlab", kind: report.GitLab, api: "/api/v4", repo: "acme/fleet", want: []request{
			{Method: "POST", Path: "/api/v4/projects/acme%2Ffleet/statuses/" + commit,
				Header: map[string]string{"Private-Token": "s3cret", "Content-Type": "application/json"},
				Body:   map[string]string{"state": "success", "name": "opke/demo", "ref": "main", "description": "3 create, 1 upload", "target_url": "https://opke.example/plans/" + commit + "/demo"}},
			{Method: "POST", Path: "/api/v4/projects/acme%2Ffleet/statuses/" + commit,
				Header: map[string]string{"Private-Token": "s3cret", "Content-Type": "application/json"},
				Body:   map[string]string{"state": "failed", "name": "opke/prod", "ref": "main", "description": long, "target_url": "https://opke.example/plans/" + commit + "/prod"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, got := forgeServer(t, http.StatusCreated)
			f := &report.Forge{Kind: tt.kind, API: srv.URL + tt.api, Repo: tt.repo, Token: "s3cret",
				ExternalURL: "https://opke.example/", Memo: &report.MemMemo{}}
			if err := f.Report(context.Background(), note()); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got()); d != "" {
				t.Errorf("requests (-want +got):\n%s", d)
			}
		})
	}
}

// TestForgeDeduplicates: an unchanged state is not posted again; a
// changed one is, once.
func TestForgeDeduplicates(t *testing.T) {
	t.Parallel()
	srv, got := forgeServer(t, http.StatusCreated)
	f := &report.Forge{Kind: report.GitHub, API: srv.URL, Repo: "acme/fleet", Token: "t", Memo: &report.MemMemo{}}
	ctx := context.Background()
	n := note()
	for range 3 {
		if err := f.Report(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if len(got()) != 2 {
		t.Fatalf("%d posts for 2 statuses reported 3 times", len(got()))
	}
	n.Clusters["prod"].State = report.Success
	n.Clusters["prod"].Summary = "no changes"
	if err := f.Report(ctx, n); err != nil {
		t.Fatal(err)
	}
	if g := got(); len(g) != 3 || g[2].Body["context"] != "opke/prod" || g[2].Body["state"] != "success" {
		t.Fatalf("after prod changed: %+v", g)
	}
}

// TestForgeFleetFindingsAndRefusals: a finding of no cluster fails the
// "opke" context; a refused status is ErrForge, not remembered (it is
// posted again next time), and its error does not carry the token.
func TestForgeFleetFindingsAndRefusals(t *testing.T) {
	t.Parallel()
	srv, got := forgeServer(t, http.StatusUnprocessableEntity)
	memo := &report.MemMemo{}
	f := &report.Forge{Kind: report.Gitea, API: srv.URL, Repo: "acme/fleet", Token: "s3cret", Memo: memo}
	n := &report.Note{Commit: commit, Ref: "refs/heads/main", Clusters: map[string]*report.Cluster{},
		Findings: []schemas.Finding{{File: "clusters", Severity: schemas.SeverityError, Message: "not a fleet"}}}
	err := f.Report(context.Background(), n)
	if !errors.Is(err, report.ErrForge) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Report: %v, want ErrForge without the token", err)
	}
	if g := got(); len(g) != 1 || g[0].Body["context"] != "opke" || g[0].Body["state"] != "failure" || g[0].Body["description"] != "clusters: not a fleet" {
		t.Fatalf("requests: %+v", g)
	}
	_ = f.Report(context.Background(), n)
	if len(got()) != 2 {
		t.Error("a refused status was remembered as posted")
	}
	if n.Overall() != report.Failure {
		t.Errorf("Overall = %s, want failure", n.Overall())
	}
}

// TestForgeFollowsNoRedirect: a forge API answering with a redirect to
// another host gets an error; the other host never sees the token.
func TestForgeFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	var leaked atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	defer other.Close()
	for _, kind := range report.Kinds() {
		t.Run(kind, func(t *testing.T) {
			forge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
			}))
			defer forge.Close()
			f := &report.Forge{Kind: kind, API: forge.URL, Repo: "acme/fleet", Token: "s3cret", Memo: &report.MemMemo{}}
			err := f.Report(context.Background(), note())
			if err == nil || !strings.Contains(err.Error(), "307") {
				t.Errorf("a redirect was not an error: %v", err)
			}
		})
	}
	if n := leaked.Load(); n != 0 {
		t.Errorf("the redirect's target got %d requests", n)
	}
}
