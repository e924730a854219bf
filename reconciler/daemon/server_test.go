package daemon_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"testing"

	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/daemon"
)

func sign(key string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// TestWebhookSignatures: only a request that proves the secret (GitHub's
// and Gitea's HMAC, GitLab's token) triggers a sync; every other gets 401
// and triggers nothing; with no secret the hook is off.
func TestWebhookSignatures(t *testing.T) {
	t.Parallel()
	store := statetest.Open(t)
	planner := &reconciler.Planner{Store: store}
	d := daemon.New(daemon.Config{Store: store, Planner: planner, Applier: &reconciler.Applier{Planner: planner}})
	body := []byte(`{"ref":"refs/heads/main","after":"0123456789abcdef0123456789abcdef01234567"}`)
	tests := []struct {
		name    string
		secret  string
		header  map[string]string
		body    []byte
		code    int
		trigger bool
	}{
		{name: "github signature", secret: secret, header: map[string]string{"X-Hub-Signature-256": sign(secret, body)}, code: 202, trigger: true},
		{name: "gitlab token", secret: secret, header: map[string]string{"X-Gitlab-Token": secret}, code: 202, trigger: true},
		{name: "no signature", secret: secret, code: 401},
		{name: "wrong key", secret: secret, header: map[string]string{"X-Hub-Signature-256": sign("other", body)}, code: 401},
		{name: "signature of another body", secret: secret, header: map[string]string{"X-Hub-Signature-256": sign(secret, []byte("{}"))}, code: 401},
		{name: "not hex", secret: secret, header: map[string]string{"X-Hub-Signature-256": "sha256=zz"}, code: 401},
		{name: "sha1 only", secret: secret, header: map[string]string{"X-Hub-Signature": "sha1=00"}, code: 401},
		{name: "wrong gitlab token", secret: secret, header: map[string]string{"X-Gitlab-Token": "guess"}, code: 401},
		{name: "hook off without a secret", header: map[string]string{"X-Gitlab-Token": ""}, code: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(d.Handler(tt.secret))
			defer srv.Close()
			daemon.Triggered(d)
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/hooks/git", bytes.NewReader(body))
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.code {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.code)
			}
			if got := daemon.Triggered(d); got != tt.trigger {
				t.Errorf("triggered = %v, want %v", got, tt.trigger)
			}
		})
	}
}

// FuzzParsePush: any body parses or is refused, never panics; what
// parses is bounded.
func FuzzParsePush(f *testing.F) {
	f.Add([]byte(`{"ref":"refs/heads/main","after":"0123456789abcdef0123456789abcdef01234567"}`))
	f.Add([]byte(`{"object_kind":"push","ref":"refs/heads/x","checkout_sha":"ab"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := daemon.ParsePush(body)
		if err == nil && (len(p.Ref) > 1024 || len(p.After) > 64) {
			t.Fatalf("unbounded push %q", p)
		}
	})
}
