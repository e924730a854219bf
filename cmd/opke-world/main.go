// Command opke-world builds the test world's Kubernetes from upstream
// source (package world): `make world` runs `opke-world build`.
//
//	opke-world build [--set all|e2e|peer|conformance] [--cache DIR]   build what is missing, print what is there
//	opke-world list  [--set all|e2e|peer|conformance]                 the artifacts and images of a set
//	opke-world push  --registry URL [--ca FILE]           load a registry mirror with a set's images, laid out
//	                                                      as spec.registryMirror reads them (URL/registry.k8s.io/...)
//	opke-world vulncheck --govulncheck BIN --db URL       the Go advisories each built binary calls (govulncheck
//	                                                      -mode binary), its own code's apart from its dependencies'
//
// Exit codes: 0 success, 1 a failed build (vulncheck: an advisory in an
// artifact's own code fixed by a release the module proxy serves, which
// world.AcceptedAdvisories does not name), 2 a usage error.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"opke.dev/opke/world"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || !slices.Contains([]string{"build", "list", "push", "vulncheck"}, args[0]) {
		fmt.Fprintln(stderr, "usage: opke-world build|list|push|vulncheck [--set all|e2e|peer|conformance] [--only KEY,...] [--cache DIR] [--registry URL --ca FILE] [--govulncheck BIN --db URL]")
		return 2
	}
	fs := flag.NewFlagSet("opke-world "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	set := fs.String("set", string(world.All), "which artifacts: all (every Kubernetes version of the test matrix), e2e (what the real-host suites use), peer (OpenTofu and terraform-provider-openstack, which make bench measures OPKE beside) or conformance (the e2e set with upstream's conformance image and agnhost, for make k8s-conformance)")
	only := fs.String("only", "", "only these artifacts of the set, by their keys (opke-world list names them), comma-separated")
	cache := fs.String("cache", world.DefaultCacheDir(), "the cache folder, outside the repository")
	registry := fs.String("registry", "", "push: the mirror's URL, https://host[:port][/path] (http:// on loopback), as spec.registryMirror.endpoint names it")
	caFile := fs.String("ca", "", "push: PEM CA of the mirror's certificate, when the system does not trust it")
	govulncheck := fs.String("govulncheck", "", "vulncheck: the govulncheck binary")
	vulndb := fs.String("db", "", "vulncheck: the vulnerability database's URL, as govulncheck -db takes it (file:///...)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "opke-world %s: unexpected arguments %q\n", args[0], fs.Args())
		return 2
	}
	arts, err := world.Targets(world.Set(*set))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if *only != "" {
		if arts, err = pick(arts, strings.Split(*only, ",")); err != nil {
			fmt.Fprintf(stderr, "opke-world %s: %v\n", args[0], err)
			return 2
		}
	}
	if args[0] == "list" {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ARTIFACT\tMODULE\tBINARIES\tIMAGES")
		for _, a := range arts {
			var bins, imgs []string
			for _, b := range a.Binaries {
				bins = append(bins, b.Name)
			}
			for _, im := range a.Images {
				imgs = append(imgs, im.Ref)
			}
			fmt.Fprintf(tw, "%s\t%s@%s\t%v\t%v\n", a.Key, a.Module, a.Version, bins, imgs)
		}
		_ = tw.Flush()
		return 0
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{}))
	started := time.Now()
	var client *http.Client
	var base, path string
	if args[0] == "vulncheck" && (*govulncheck == "" || *vulndb == "") {
		fmt.Fprintln(stderr, "opke-world vulncheck: --govulncheck and --db are required")
		return 2
	}
	if args[0] == "push" {
		if client, base, path, err = pushTarget(*registry, *caFile); err != nil {
			fmt.Fprintf(stderr, "opke-world push: %v\n", err)
			return 2
		}
	}
	built, err := world.New(*cache, log).Ensure(ctx, arts)
	if err == nil && args[0] == "push" {
		host := strings.TrimPrefix(strings.TrimPrefix(base, "https://"), "http://")
		err = built.PushAll(ctx, client, base, path, func(ref, repo, tag string) {
			fmt.Fprintf(stdout, "pushed %s as %s/%s:%s\n", ref, host, repo, tag)
		})
	}
	if err == nil && args[0] == "vulncheck" {
		return vulncheck(ctx, arts, built, *govulncheck, *vulndb, stdout, stderr)
	}
	if built != nil {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ARTIFACT\tSTATE\tTOOK")
		for _, r := range built.Artifacts {
			state := "built"
			if r.Cached {
				state = "cached"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Key, state, r.Took.Round(time.Second))
		}
		_ = tw.Flush()
		fmt.Fprintf(stdout, "%d artifacts, %d images in %s, %s\n", len(built.Artifacts), len(built.Images()), *cache, time.Since(started).Round(time.Second))
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "opke-world: interrupted; what was built is kept")
		}
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// pushTarget checks a mirror URL and returns the client, the registry's
// base URL and the path its images go under.
func pushTarget(registry, caFile string) (*http.Client, string, string, error) {
	u, err := url.Parse(registry)
	switch {
	case err != nil:
		return nil, "", "", errors.New("--registry: not a URL; want https://host[:port][/path] without credentials")
	case u.User != nil:
		return nil, "", "", fmt.Errorf("--registry %s: want https://host[:port][/path] without credentials", u.Redacted())
	case u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return nil, "", "", fmt.Errorf("--registry %q: want https://host[:port][/path] without credentials", registry)
	}
	if u.Scheme == "http" {
		if ip, perr := netip.ParseAddr(u.Hostname()); perr != nil || !ip.IsLoopback() {
			return nil, "", "", fmt.Errorf("--registry %q: plain http only to a loopback address", registry)
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, "", "", fmt.Errorf("--ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, "", "", fmt.Errorf("--ca %s: no PEM certificate", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Minute}, u.Scheme + "://" + u.Host, u.Path, nil
}

// pick keeps the artifacts keys names, in the set's order; a key the set
// does not have is an error naming those it has.
func pick(arts []world.Artifact, keys []string) ([]world.Artifact, error) {
	var out []world.Artifact
	var known []string
	for _, a := range arts {
		known = append(known, a.Key)
		if slices.Contains(keys, a.Key) {
			out = append(out, a)
		}
	}
	for _, k := range keys {
		if !slices.Contains(known, k) {
			return nil, fmt.Errorf("--only: no artifact %q in this set (it has %s)", k, strings.Join(known, ", "))
		}
	}
	return out, nil
}

// vulncheck scans the built binaries of arts and prints each artifact's
// advisories; an advisory in an artifact's own code fixed by a release
// the module proxy lists, which world.Accepted does not pass, fails it.
func vulncheck(ctx context.Context, arts []world.Artifact, built *world.Built, bin, db string, stdout, stderr io.Writer) int {
	scan := func(ctx context.Context, binary string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, bin, "-mode", "binary", "-json", "-db", db, binary)
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %s", bin, err, strings.TrimSpace(errOut.String()))
		}
		return out, nil
	}
	reports, err := world.Vulncheck(ctx, arts, built, scan)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	world.FormatVulnReports(stdout, reports)
	listed := map[string][]string{} // the proxy's versions, once per module
	served := func(module string) ([]string, error) {
		if v, ok := listed[module]; ok {
			return v, nil
		}
		out, err := exec.CommandContext(ctx, "go", "list", "-m", "-versions", module).Output()
		if err != nil {
			return nil, fmt.Errorf("go list -m -versions %s: %w", module, err)
		}
		f := strings.Fields(string(out))
		if len(f) > 0 {
			f = f[1:]
		}
		listed[module] = f
		return f, nil
	}
	code := 0
	for _, r := range reports {
		for _, a := range r.Own() {
			if why, ok := world.Accepted(r.Key, a); ok {
				fmt.Fprintf(stdout, "accepted: %s in %s: %s\n", a.ID, r.Key, why)
				continue
			}
			if a.Fixed == "" {
				fmt.Fprintf(stdout, "no fix: %s in %s: no release fixes it\n", a.ID, r.Key)
				continue
			}
			versions, err := served(a.Module)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
			if fix := world.FixServed(a, versions); fix != "" {
				fmt.Fprintf(stderr, "opke-world vulncheck: %s@%s calls %s, fixed in %s, which the module proxy serves (%s): move the pin\n", r.Module, r.Version, a.ID, a.Fixed, fix)
				code = 1
				continue
			}
			fmt.Fprintf(stdout, "not buildable: %s in %s: fixed in %s, which the module proxy does not serve\n", a.ID, r.Key, a.Fixed)
		}
	}
	return code
}
