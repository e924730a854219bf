package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// The forges whose commit status APIs Forge speaks.
const (
	GitHub = "github"
	Gitea  = "gitea"
	GitLab = "gitlab"
)

// forgeKinds lists the forges.
var forgeKinds = []string{GitHub, Gitea, GitLab}

// Kinds returns a copy of forgeKinds: no caller can rewrite the package's own.
func Kinds() []string {
	return slices.Clone(forgeKinds)
}

// maxDescription is the longest description every forge takes (GitHub's
// limit: 140 characters).
const maxDescription = 140

// ErrForge is a status the forge refused.
var ErrForge = errors.New("the forge refused the commit status")

// Memo remembers what was posted, so an unchanged state is not posted
// twice, across restarts and leaders when it is the state store.
type Memo interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key string, value []byte) error
}

// MemMemo is a Memo in memory.
type MemMemo struct {
	mu sync.Mutex
	m  map[string][]byte
}

// Get implements Memo.
func (m *MemMemo) Get(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[key]
	if !ok {
		return nil, errors.New("not posted")
	}
	return v, nil
}

// Put implements Memo.
func (m *MemMemo) Put(_ context.Context, key string, value []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string][]byte{}
	}
	m.m[key] = value
	return nil
}

// Forge reports as commit statuses: one context per cluster
// (opke/<cluster>; "opke" for the commit as a whole when no cluster is
// to blame), a description within every forge's limit, and a link to the
// daemon's page of the cluster's plan.
type Forge struct {
	// Kind is GitHub, Gitea or GitLab.
	Kind string
	// API is the API's base URL: https://api.github.com,
	// https://gitea.example.com/api/v1, https://gitlab.example.com/api/v4.
	API string
	// Repo is owner/name (GitLab: the project's path or id).
	Repo  string
	Token string
	// ExternalURL is the daemon's address as people reach it; statuses
	// link to ExternalURL/plans/<commit>/<cluster>.
	ExternalURL string
	Client      *http.Client
	Memo        Memo
}

// String names the forge, never its token.
func (f *Forge) String() string { return f.Kind + " " + f.Repo }

// status is one commit status to post.
type status struct {
	Context, Description, TargetURL string
	State                           State
}

// statuses are the note's commit statuses.
func (f *Forge) statuses(n *Note) []status {
	var out []status
	for _, name := range slices.Sorted(maps.Keys(n.Clusters)) {
		c := n.Clusters[name]
		st := status{Context: "opke/" + name, State: c.State, Description: c.Summary}
		if f.ExternalURL != "" {
			st.TargetURL = strings.TrimSuffix(f.ExternalURL, "/") + "/plans/" + n.Commit + "/" + url.PathEscape(name)
		}
		out = append(out, st)
	}
	var fleet []string
	for _, fd := range n.Findings {
		if ClusterOf(fd.File) == "" {
			fleet = append(fleet, fd.String())
		}
	}
	if n.Message != "" {
		fleet = append([]string{n.Message}, fleet...)
	}
	if len(fleet) > 0 {
		st := status{Context: "opke", State: Failure, Description: strings.Join(fleet, "; ")}
		if f.ExternalURL != "" {
			st.TargetURL = strings.TrimSuffix(f.ExternalURL, "/") + "/commits/" + n.Commit
		}
		out = append(out, st)
	}
	return out
}

// Report implements Reporter: each status whose state or description
// changed since it was last posted is posted.
func (f *Forge) Report(ctx context.Context, n *Note) error {
	var errs []error
	for _, st := range f.statuses(n) {
		st.Description = truncate(st.Description, maxDescription)
		key := f.Kind + "/" + n.Commit + "/" + st.Context
		sum := []byte(string(st.State) + "\n" + st.Description)
		if f.Memo != nil {
			if old, err := f.Memo.Get(ctx, key); err == nil && bytes.Equal(old, sum) {
				continue
			}
		}
		if err := f.post(ctx, n, st); err != nil {
			errs = append(errs, err)
			continue
		}
		if f.Memo != nil {
			if err := f.Memo.Put(ctx, key, sum); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (f *Forge) post(ctx context.Context, n *Note, st status) error {
	api := strings.TrimSuffix(f.API, "/")
	var endpoint string
	body := map[string]string{"state": string(st.State), "context": st.Context, "description": st.Description}
	if st.TargetURL != "" {
		body["target_url"] = st.TargetURL
	}
	header := http.Header{"Content-Type": {"application/json"}}
	switch f.Kind {
	case GitHub:
		endpoint = api + "/repos/" + f.Repo + "/statuses/" + n.Commit
		header.Set("Accept", "application/vnd.github+json")
		header.Set("X-GitHub-Api-Version", "2022-11-28")
		header.Set("Authorization", "Bearer "+f.Token)
	case Gitea:
		endpoint = api + "/repos/" + f.Repo + "/statuses/" + n.Commit
		header.Set("Authorization", "token "+f.Token)
	case GitLab:
		endpoint = api + "/projects/" + url.PathEscape(f.Repo) + "/statuses/" + n.Commit
		header.Set("PRIVATE-TOKEN", f.Token)
		// GitLab names the context "name" and has "failed" for both
		// failure and error.
		delete(body, "context")
		body["name"] = st.Context
		if st.State == Failure || st.State == Error {
			body["state"] = "failed"
		}
		if ref, ok := strings.CutPrefix(n.Ref, "refs/heads/"); ok {
			body["ref"] = ref
		}
	default:
		return fmt.Errorf("forge %q: want one of %s", f.Kind, strings.Join(forgeKinds, ", "))
	}
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s status %s: %w", f.Kind, st.Context, err)
	}
	req.Header = header
	client := &http.Client{Timeout: 30 * time.Second}
	if f.Client != nil {
		c := *f.Client
		client = &c
	}
	// A redirect is never followed: the token headers (GitLab's
	// PRIVATE-TOKEN is not one Go drops) would go where it points, and a
	// status API does not move. The 3xx is the error.
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s status %s of %s: %w", f.Kind, st.Context, n.Commit, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s status %s of %s: %s: %s: %w", f.Kind, st.Context, n.Commit, resp.Status, bytes.TrimSpace(excerpt), ErrForge)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// truncate cuts s to n characters, ending with an ellipsis when cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
