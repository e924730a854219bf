//go:build realhosts

package main

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"opke.dev/opke/world"
	"opke.dev/opke/world/worldtest"
)

// TestPushLoadsAMirror: opke-world push loads every image of the e2e set
// into a real registry under the mirror's layout, as a cluster's
// registryMirror then reads it.
func TestPushLoadsAMirror(t *testing.T) {
	built := worldtest.E2E(t, nil)
	bin, _ := built.Binary("distribution-"+world.DistributionVersion, "registry")
	base := worldtest.Registry(t, bin)
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"push", "--set", "e2e", "--registry", base + "/k8s"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, ref := range built.Images() {
		repo, tag, err := world.MirrorName(ref, "k8s")
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodHead, base+"/v2/"+repo+"/manifests/"+tag, nil)
		req.Header.Set("Accept", world.MediaManifest)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %s in the mirror: %s", ref, repo+":"+tag, resp.Status)
		}
		if !strings.Contains(out.String(), "pushed "+ref+" as ") {
			t.Errorf("the output does not say %s was pushed:\n%s", ref, out.String())
		}
	}
}
