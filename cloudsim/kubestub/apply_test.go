package kubestub

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Server-side apply as the real API server answers it: what it refuses,
// and created then updated.
func TestServerSideApply(t *testing.T) {
	b := &memBackend{}
	srv := httptest.NewServer(Handler("v1.35.1", b))
	defer srv.Close()
	const ds = `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"kube-proxy","namespace":"kube-system"}}`
	const apply = "application/apply-patch+yaml"
	for _, tc := range []struct {
		name, method, path, contentType, body string
		want                                  int
		wantBody                              string
	}{
		{"discovery of the core group", "GET", "/api/v1", "", "", 200, `"name":"configmaps"`},
		{"discovery of apps", "GET", "/apis/apps/v1", "", "", 200, `"kind":"DaemonSet"`},
		{"discovery of a group not served", "GET", "/apis/example.org/v1", "", "", 404, "could not find"},
		{"no field manager", "PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy", apply, ds, 422, "fieldManager: Required value"},
		{"a strategic merge patch", "PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy?fieldManager=t", "application/strategic-merge-patch+json", ds, 415, "unknown format"},
		{"a merge patch of an object not there", "PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy", "application/merge-patch+json",
			`{"spec":{"template":{"metadata":{"annotations":{"a":"b"}}}}}`, 404, `daemonsets \"kube-proxy\" not found`},
		{"another name", "PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/other?fieldManager=t", apply, ds, 400, "does not match the name"},
		{"another kind", "PATCH", "/apis/apps/v1/namespaces/kube-system/deployments/kube-proxy?fieldManager=t", apply, ds, 400, "not a Deployment"},
		{"a resource not served", "PATCH", "/apis/apps/v1/namespaces/kube-system/widgets/kube-proxy?fieldManager=t", apply, ds, 404, "could not find"},
		{"a namespaced resource without a namespace", "PATCH", "/apis/apps/v1/daemonsets/kube-proxy?fieldManager=t", apply, ds, 404, "could not find"},
		{"a namespace that does not exist", "PATCH", "/api/v1/namespaces/kube-flannel/configmaps/cfg?fieldManager=t", apply,
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n", 404, `namespaces \"kube-flannel\" not found`},
		{"a namespace", "PATCH", "/api/v1/namespaces/kube-flannel?fieldManager=t", apply, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kube-flannel\n", 201, `"name":"kube-flannel"`},
		{"then an object in it", "PATCH", "/api/v1/namespaces/kube-flannel/configmaps/cfg?fieldManager=t", apply,
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n", 201, `"namespace":"kube-flannel"`},
		{"created", "PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy?fieldManager=t", apply, ds, 201, `"kube-proxy"`},
		{"applied again", "PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy?fieldManager=t", apply, ds, 200, `"kube-proxy"`},
		{"read back", "GET", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy", "", "", 200, `"kind":"DaemonSet"`},
		{"a merge patch, as kubectl rollout restart sends", "PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy", "application/merge-patch+json",
			`{"spec":{"template":{"metadata":{"annotations":{"a":"b"}}}}}`, 200, `"generation":2`},
		{"the patch kept", "GET", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy", "", "", 200, `"annotations":{"a":"b"}`},
		{"listed", "GET", "/apis/apps/v1/daemonsets", "", "", 200, `"kind":"DaemonSetList"`},
		{"one never applied", "GET", "/apis/apps/v1/namespaces/kube-system/daemonsets/flannel", "", "", 404, `daemonsets \"flannel\" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var sb strings.Builder
			_, _ = io.Copy(&sb, resp.Body)
			if resp.StatusCode != tc.want || !strings.Contains(sb.String(), tc.wantBody) {
				t.Errorf("%s %s: %d %s, want %d with %q", tc.method, tc.path, resp.StatusCode, sb.String(), tc.want, tc.wantBody)
			}
		})
	}
}
