package world

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"golang.org/x/mod/semver"
)

// Advisory is a Go vulnerability report (golang.org/x/vulndb) whose
// vulnerable code govulncheck finds called in a built binary.
type Advisory struct {
	ID string
	// Module is the module the vulnerable code is in, at Found; Fixed is
	// the first version that fixes it ("" when none does).
	Module, Found, Fixed string
	// Own: the vulnerable code is the artifact's own module (its
	// release's code), not a dependency its release pins.
	Own bool
	// Binaries are the artifact's binaries that call it.
	Binaries []string
}

// VulnReport is what govulncheck found in one artifact's binaries.
type VulnReport struct {
	Key, Module, Version string
	Advisories           []Advisory
}

// Own are the report's advisories in the artifact's own module.
func (r VulnReport) Own() []Advisory {
	var own []Advisory
	for _, a := range r.Advisories {
		if a.Own {
			own = append(own, a)
		}
	}
	return own
}

// Scanner runs govulncheck on a binary (-mode binary -json) and returns
// its JSON stream.
type Scanner func(ctx context.Context, binary string) ([]byte, error)

// Vulncheck scans every Go binary of arts that b holds and reports, per
// artifact, the advisories whose vulnerable functions its binaries call
// (govulncheck's symbol results; a module merely linked is not counted).
// An artifact b did not build is an error: scan what was built.
func Vulncheck(ctx context.Context, arts []Artifact, b *Built, scan Scanner) ([]VulnReport, error) {
	var reports []VulnReport
	for _, a := range arts {
		if a.Lang != Go || len(a.Binaries) == 0 {
			continue
		}
		rep := VulnReport{Key: a.Key, Module: a.Module, Version: a.Version}
		byID := map[string]*Advisory{}
		for _, bin := range a.Binaries {
			path, ok := b.Binary(a.Key, bin.Name)
			if !ok {
				return nil, fmt.Errorf("vulncheck: %s's %s is not built", a.Key, bin.Name)
			}
			out, err := scan(ctx, path)
			if err != nil {
				return nil, fmt.Errorf("vulncheck: %s's %s: %w", a.Key, bin.Name, err)
			}
			found, err := parseGovulncheck(out)
			if err != nil {
				return nil, fmt.Errorf("vulncheck: %s's %s: %w", a.Key, bin.Name, err)
			}
			for _, f := range found {
				adv := byID[f.ID+" "+f.Module]
				if adv == nil {
					f.Own = ownModule(a, f.Module, f.Found)
					adv = &f
					byID[f.ID+" "+f.Module] = adv
				}
				if !slices.Contains(adv.Binaries, bin.Name) {
					adv.Binaries = append(adv.Binaries, bin.Name)
				}
			}
		}
		for _, k := range slices.Sorted(maps.Keys(byID)) {
			rep.Advisories = append(rep.Advisories, *byID[k])
		}
		reports = append(reports, rep)
	}
	return reports, nil
}

// ownModule reports whether module at version is the artifact's own
// release: its module, the modules it builds with it (Also), those of the
// same release train (etcd's server/v3 at etcd's version), and
// Kubernetes' staging modules at its v0.MINOR.PATCH.
func ownModule(a Artifact, module, version string) bool {
	switch {
	case module == a.Module, a.Also[module] != "":
		return true
	case version == a.Version:
		return true
	case a.Module == "k8s.io/kubernetes" && strings.HasPrefix(a.Version, "v1."):
		return version == "v0."+strings.TrimPrefix(a.Version, "v1.")
	}
	return false
}

// govulncheckMessage is one message of govulncheck's JSON stream
// (golang.org/x/vuln/internal/govulncheck); only findings are read.
type govulncheckMessage struct {
	Finding *struct {
		OSV          string `json:"osv"`
		FixedVersion string `json:"fixed_version"`
		Trace        []struct {
			Module   string `json:"module"`
			Version  string `json:"version"`
			Package  string `json:"package"`
			Function string `json:"function"`
		} `json:"trace"`
	} `json:"finding"`
}

// parseGovulncheck reads govulncheck's JSON stream and returns its
// symbol-level findings, one per advisory and module.
func parseGovulncheck(stream []byte) ([]Advisory, error) {
	dec := json.NewDecoder(bytes.NewReader(stream))
	seen := map[string]bool{}
	var out []Advisory
	for {
		var m govulncheckMessage
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("govulncheck's output: %w", err)
		}
		f := m.Finding
		if f == nil || len(f.Trace) == 0 || f.Trace[0].Function == "" {
			continue
		}
		t := f.Trace[0]
		if f.OSV == "" || t.Module == "" {
			return nil, fmt.Errorf("govulncheck's output: a finding without an advisory or a module")
		}
		if k := f.OSV + " " + t.Module; !seen[k] {
			seen[k] = true
			out = append(out, Advisory{ID: f.OSV, Module: t.Module, Found: t.Version, Fixed: f.FixedVersion})
		}
	}
}

// FormatVulnReports writes one line per artifact (its own advisories by
// id with the version fixing each, and how many of its dependencies'
// are called), then the total.
func FormatVulnReports(w io.Writer, reports []VulnReport) {
	var own, deps int
	for _, r := range reports {
		var ids []string
		for _, a := range r.Own() {
			fixed := a.Fixed
			if fixed == "" {
				fixed = "no fix"
			}
			ids = append(ids, a.ID+" (fixed in "+fixed+")")
		}
		n := len(r.Advisories) - len(ids)
		own, deps = own+len(ids), deps+n
		line := "none of its own"
		if len(ids) > 0 {
			line = strings.Join(ids, ", ")
		}
		fmt.Fprintf(w, "%-28s %s@%s: %s; %d of its dependencies'\n", r.Key, r.Module, r.Version, line, n)
	}
	fmt.Fprintf(w, "%d artifacts: %d advisories in their own code, %d in their dependencies' (called)\n", len(reports), own, deps)
}

// FixServed returns the first of versions (a module's, as the module
// proxy lists them) of the advisory's major version at or past its fix,
// "" when none is: the world cannot build a fixed release.
func FixServed(a Advisory, versions []string) string {
	for _, v := range versions {
		if semver.Major(v) == semver.Major(a.Fixed) && semver.Compare(v, a.Fixed) >= 0 && semver.Prerelease(v) == "" {
			return v
		}
	}
	return ""
}

// AcceptedAdvisories are advisories in an artifact's own code whose
// fixed release the module proxy lists but OPKE does not render yet, each
// with why: by advisory id, or by artifact key for every advisory of that
// pin (a new pin is judged afresh).
var AcceptedAdvisories = map[string]string{
	"GO-2026-5736": etcdPin,
	"GO-2026-6107": etcdPin,
	"GO-2026-6114": etcdPin,
	"traefik-v3.6.12": "the world's stand-in for Traefik v3.7.13, which the gateway addon renders and which fixes them: v3.7's dependencies are refused (403: lego's DNS providers' SDKs, " +
		"containous/go-http-auth) and the proxy serves no later v3.6, so v3.6.12 is the newest Traefik the world builds (world/LIMITS.md)",
}

// Accepted returns why an advisory of an artifact passes, if it does.
func Accepted(key string, a Advisory) (string, bool) {
	if why, ok := AcceptedAdvisories[a.ID]; ok {
		return why, true
	}
	why, ok := AcceptedAdvisories[key]
	return why, ok
}

// etcdPin is why etcd 3.6.8's and 3.7.0's advisories pass: OPKE runs
// the etcd kubeadm pins for each minor.
const etcdPin = "etcd 3.6.8-0 and 3.7.0-0 are kubeadm's pins for Kubernetes 1.36 and 1.37 (cmd/kubeadm/app/constants, unchanged through v1.36.3 and v1.37.2), which OPKE renders as kubeadm does; " +
	"the RBAC and watch authorization bypasses need etcd's auth, which OPKE's etcd does not enable (client certificates only); the handshake exhaustion needs a peer in the nodes' security group"
