package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"opke.dev/opke/reconciler/source"
	"opke.dev/opke/render"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
)

// renderManifest is OUT/manifest.json: what was rendered, without bytes.
// Hosts are the assets' own JSON form: each host with its files (path,
// mode, owner, sha256, size, secret, units to restart).
type renderManifest struct {
	Cluster  string             `json:"cluster"`
	Version  string             `json:"version"`
	UserData []renderUserData   `json:"userdata"`
	Hosts    []assets.HostFiles `json:"hosts"`
}

type renderUserData struct {
	Role   schemas.Role `json:"role"`
	Path   string       `json:"path"`
	SHA256 string       `json:"sha256"`
	Size   int          `json:"size"`
}

func (a *app) renderCommand() *cobra.Command {
	var st stateFlags
	var repo, rev, cluster, out, credFile, fip string
	cmd := &cobra.Command{
		Use:   "render --cluster NAME --out DIR",
		Short: "Render a cluster's user_data and host files into a folder",
		Long: `Render every asset of one cluster of the fleet under --repo: the Ignition
config of each role (OUT/userdata/<role>.ign), the files pushed to each host
over SSH (OUT/hosts/<host>/<absolute path>) and OUT/manifest.json (host, path,
mode, sha256 of every file). Missing TLS material is issued into the state
store and reused by the next render, so rendering twice gives the same bytes.

Before the cluster exists its planned addresses are used and the API's
floating IP is left out of the serving certificates (--api-floating-ip adds
it). Secret files are written 0600 and never printed. OUT is replaced as a
whole; a non-empty folder that is not an earlier render is refused.`,
		Example: `  opke render --cluster prod --out /tmp/prod
  opke render --repo fleet/ --rev origin/main --cluster prod --out out/ --app-credential cred.yaml`,
		Args: argsAtMost(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cluster == "" || out == "" {
				return usagef("--cluster and --out are required")
			}
			var floating netip.Addr
			if fip != "" {
				var err error
				if floating, err = netip.ParseAddr(fip); err != nil {
					return usagef("--api-floating-ip: %w", err)
				}
			}
			if err := checkOutDir(out); err != nil {
				return err
			}
			c, err := a.loadCluster(cmd, repo, rev, cluster)
			if err != nil {
				return err
			}
			opts := render.Options{Now: time.Now(), APIFloatingIP: floating}
			if credFile != "" {
				if opts.Cloud, err = readCredential(credFile); err != nil {
					return usageError{err}
				}
			}
			store, err := st.open(cmd.Context(), a)
			if err != nil {
				return err
			}
			defer store.Close()
			rendered, err := render.Cluster(cmd.Context(), store, c, opts)
			if err != nil {
				return err
			}
			m, err := writeRender(out, rendered)
			if err != nil {
				return err
			}
			files, secret := 0, 0
			for _, h := range m.Hosts {
				files += len(h.Files)
				for _, f := range h.Files {
					if f.Secret {
						secret++
					}
				}
			}
			fmt.Fprintf(a.stdout, "rendered %s (Kubernetes %s) into %s: user_data for %d roles, %d files for %d hosts (%d secret, 0600); %d new TLS items issued\n",
				c.Metadata.Name, m.Version, out, len(m.UserData), files, len(m.Hosts), secret, len(rendered.Issued))
			if opts.Cloud == nil && slices.ContainsFunc(c.Spec.Addons, func(ad schemas.Addon) bool {
				return ad.Name == "openstack-cloud-controller-manager" || ad.Name == "cinder-csi"
			}) {
				fmt.Fprintln(a.stdout, "note: no --app-credential, so no cloud.conf; the cloud provider addons need one")
			}
			return nil
		},
	}
	st.register(cmd)
	fl := cmd.Flags()
	repoFlag(fl, &repo)
	fl.StringVar(&rev, "rev", "", "render the fleet at this git revision instead of the work tree")
	fl.StringVar(&cluster, "cluster", "", "the cluster to render")
	fl.StringVar(&out, "out", "", "the folder to write into")
	fl.StringVar(&credFile, "app-credential", "", "YAML or JSON file with auth_url, region, application_credential_id and _secret, for cloud.conf")
	fl.StringVar(&fip, "api-floating-ip", "", "the API's floating IP, once known, for the serving certificates")
	return cmd
}

// loadCluster reads the fleet (at rev when set) and returns the named,
// valid cluster; findings are printed and end the command with code 1.
func (a *app) loadCluster(cmd *cobra.Command, repo, rev, name string) (*schemas.Cluster, error) {
	fleet, err := a.loadFleet(cmd, repo, rev)
	if err != nil {
		return nil, err
	}
	if err := a.refuseFindings(fleet, name, "nothing rendered"); err != nil {
		return nil, err
	}
	c, ok := fleet.Clusters()[name]
	if !ok {
		return nil, usagef("cluster %q is not in %s (clusters: %s)", name, repo, strings.Join(slices.Sorted(maps.Keys(fleet.Clusters())), ", "))
	}
	return c, nil
}

// loadFleet reads the fleet under repo, at rev when set.
func (a *app) loadFleet(cmd *cobra.Command, repo, rev string) (*schemas.Fleet, error) {
	if st, err := os.Stat(repo); err != nil || !st.IsDir() {
		return nil, usagef("--repo %s: not a folder", repo)
	}
	fsys, closeFS, err := folderFS(repo)
	if err != nil {
		return nil, err
	}
	defer closeFS()
	if rev != "" {
		fsys, err = source.OpenRevision(cmd.Context(), repo, rev)
		switch {
		case errors.Is(err, source.ErrNoRepository), errors.Is(err, source.ErrUnknownRevision):
			return nil, usagef("--rev: %w", err)
		case err != nil:
			return nil, fmt.Errorf("--rev: %w", err)
		}
	}
	fleet, err := schemas.LoadFleet(fsys, repo)
	if errors.Is(err, schemas.ErrNotFleet) {
		return nil, usagef("--repo %s: %w", repo, err)
	}
	if err != nil {
		return nil, fmt.Errorf("load fleet: %w", err)
	}
	return fleet, nil
}

// refuseFindings prints the errors of the named cluster's file (of every
// file, and the fleet's own, when name is empty) and ends the command
// with code 1 if there are any.
func (a *app) refuseFindings(fleet *schemas.Fleet, name, consequence string) error {
	var errs schemas.Findings
	if name == "" {
		errs = fleet.Findings
	} else {
		// The cluster's own file decides, not a match on finding texts.
		for _, f := range fleet.Files {
			if path.Base(path.Dir(filepath.ToSlash(f.Path))) == name {
				errs = append(errs, f.Findings...)
			}
		}
	}
	if !errs.HasErrors() {
		return nil
	}
	for _, fd := range errs {
		fmt.Fprintln(a.stderr, fd)
	}
	what := "the fleet is"
	if name != "" {
		what = "cluster " + name + " is"
	}
	fmt.Fprintf(a.stderr, "opke: %s not valid; %s\n", what, consequence)
	return exitCodeError{exitFindings}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// readCredential reads an application credential file (YAML or JSON).
func readCredential(path string) (*assets.CloudCredential, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--app-credential: %w", err)
	}
	var raw map[string]string
	if err := yaml.Unmarshal(b, &raw); err != nil {
		// The file holds a secret: never echo its content.
		return nil, fmt.Errorf("--app-credential %s: not a YAML or JSON map of strings", path)
	}
	c := &assets.CloudCredential{AuthURL: raw["auth_url"], Region: raw["region"], ID: raw["application_credential_id"],
		Secret: raw["application_credential_secret"], SubnetID: raw["subnet_id"], FloatingNetworkID: raw["floating_network_id"]}
	if c.AuthURL == "" || c.ID == "" || c.Secret == "" {
		return nil, fmt.Errorf("--app-credential %s: auth_url, application_credential_id and application_credential_secret are required", path)
	}
	return c, nil
}

// checkOutDir refuses an output folder that holds something other than an
// earlier render.
func checkOutDir(out string) error {
	entries, err := os.ReadDir(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return usagef("--out %s: %w", out, err)
	}
	if len(entries) == 0 {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	if err != nil {
		return usagef("--out %s: not empty and not an earlier render (no manifest.json); refusing to replace it", out)
	}
	// Every file there must be one the render listed: a folder that
	// merely holds a manifest.json of its own is not replaced.
	var m renderManifest
	if err := json.Unmarshal(b, &m); err != nil || m.Cluster == "" {
		return usagef("--out %s: not empty and not an earlier render (its manifest.json is not a render's); refusing to replace it", out)
	}
	listed := map[string]bool{"manifest.json": true}
	for _, u := range m.UserData {
		listed[filepath.Clean(u.Path)] = true
	}
	for _, h := range m.Hosts {
		for _, f := range h.Files {
			listed[filepath.Join("hosts", h.Name, filepath.FromSlash(f.Path))] = true
		}
	}
	return filepath.WalkDir(out, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return usagef("--out %s: %w", out, err)
		}
		rel, _ := filepath.Rel(out, path)
		if d.IsDir() || listed[rel] && d.Type().IsRegular() {
			return nil
		}
		return usagef("--out %s: not an earlier render: it holds %s, which the render did not write; refusing to replace it", out, rel)
	})
}

// writeRender writes the render into a fresh folder beside out, then swaps
// it in, so out is either the old render or the new one, never a mix.
func writeRender(out string, r *render.Output) (*renderManifest, error) {
	parent := filepath.Dir(filepath.Clean(out))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(out)+".new-")
	if err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	m := &renderManifest{Cluster: r.Cluster, Version: r.Assets.Version, Hosts: r.Assets.Hosts}
	for _, role := range schemas.Roles() {
		ud := r.UserData[role]
		rel := filepath.Join("userdata", string(role)+".ign")
		if err := writeFile(filepath.Join(tmp, rel), ud, 0o644); err != nil {
			return nil, err
		}
		m.UserData = append(m.UserData, renderUserData{Role: role, Path: rel, SHA256: sha256Hex(ud), Size: len(ud)})
	}
	for _, h := range r.Assets.Hosts {
		for _, f := range h.Files {
			// A secret is the user's alone here: the group a host gives it
			// (cloud.conf's, the cloud controller manager's) is not the
			// user's group on this machine.
			mode := f.Mode
			if f.Secret {
				mode = 0o600
			}
			if err := writeFile(filepath.Join(tmp, "hosts", h.Name, filepath.FromSlash(f.Path)), f.Data, mode); err != nil {
				return nil, err
			}
		}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if err := writeFile(filepath.Join(tmp, "manifest.json"), append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	old := tmp + ".old"
	if err := os.Rename(out, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--out: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		_ = os.Rename(old, out)
		return nil, fmt.Errorf("--out: %w", err)
	}
	if err := os.RemoveAll(old); err != nil {
		return nil, fmt.Errorf("--out: remove the previous render: %w", err)
	}
	return m, nil
}

// folderFS is a working folder as a file system that refuses paths out of
// it: a spec that is a symlink to a file elsewhere (someone's key, read
// and echoed in findings) is an error, and nothing of it is read.
func folderFS(dir string) (fs.FS, func(), error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, usagef("%s: %w", dir, err)
	}
	return root.FS(), func() { _ = root.Close() }, nil
}

// writeFile creates path with its final mode before any byte is written.
func writeFile(path string, data []byte, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode.Perm())
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(mode.Perm()); err != nil { // the umask may have narrowed it
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
