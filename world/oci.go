package world

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"opke.dev/opke/render/assets"
)

// OCI media types of what WriteImage writes.
const (
	MediaIndex    = "application/vnd.oci.image.index.v1+json"
	MediaManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaConfig   = "application/vnd.oci.image.config.v1+json"
	MediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Manifest is an OCI image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Index is an OCI image index (a layout's index.json).
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType,omitempty"`
	Manifests     []Descriptor `json:"manifests"`
}

// ImageConfig is the part of an OCI image configuration WriteImage fills.
type ImageConfig struct {
	Created      time.Time `json:"created"`
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Config       struct {
		Env        []string `json:"Env,omitempty"`
		User       string   `json:"User,omitempty"`
		Entrypoint []string `json:"Entrypoint,omitempty"`
		Cmd        []string `json:"Cmd,omitempty"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []struct {
		Created   time.Time `json:"created"`
		CreatedBy string    `json:"created_by"`
	} `json:"history,omitempty"`
}

// Annotations an image layout's index gives its manifest: the tag (OCI)
// and the full name (containerd's ctr import reads it).
const (
	AnnotationRefName = "org.opencontainers.image.ref.name"
	AnnotationImage   = "io.containerd.image.name"
)

// WriteImage writes spec's image as an OCI image layout in dir (created,
// emptied first): base's layer first when spec has a base, then one gzip
// layer holding spec.Files, read from files (a binary's name to its
// path), owned by root with the given time, so that the same binaries
// always make the same digests. origin says where the binaries come from,
// for the image's history.
func WriteImage(dir string, spec ImageSpec, files map[string]string, created time.Time, origin string, base *Layer) (Descriptor, error) {
	tag, ok := assets.ImageTag(spec.Ref)
	if !ok {
		return Descriptor{}, fmt.Errorf("image %q: no tag", spec.Ref)
	}
	if err := os.RemoveAll(dir); err != nil {
		return Descriptor{}, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return Descriptor{}, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	if (base == nil) != (spec.Base == nil) {
		return Descriptor{}, fmt.Errorf("image %s: a base layer must be given exactly when the image has a base", spec.Ref)
	}
	var layers []Descriptor
	var diffIDs, history []string
	if base != nil {
		if err := linkOrCopy(base.Path, filepath.Join(blobs, strings.TrimPrefix(base.Descriptor.Digest, "sha256:"))); err != nil {
			return Descriptor{}, fmt.Errorf("image %s: base layer: %w", spec.Ref, err)
		}
		layers, diffIDs = append(layers, base.Descriptor), append(diffIDs, base.DiffID)
		history = append(history, "opke world: debian "+spec.Base.Suite+": "+strings.Join(spec.Base.Packages, " "))
	}
	layer, diffID, err := writeLayer(blobs, spec, files, created)
	if err != nil {
		return Descriptor{}, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	layers, diffIDs = append(layers, layer), append(diffIDs, diffID)
	history = append(history, "opke world: "+origin)
	var cfg ImageConfig
	cfg.Created, cfg.Architecture, cfg.OS = created, "amd64", "linux"
	cfg.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"}, spec.Env...)
	cfg.Config.Entrypoint, cfg.Config.Cmd, cfg.Config.User = spec.Entrypoint, spec.Cmd, spec.User
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = diffIDs
	for _, h := range history {
		cfg.History = append(cfg.History, struct {
			Created   time.Time `json:"created"`
			CreatedBy string    `json:"created_by"`
		}{created, h})
	}
	config, err := writeJSONBlob(blobs, MediaConfig, cfg)
	if err != nil {
		return Descriptor{}, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	manifest, err := writeJSONBlob(blobs, MediaManifest, Manifest{SchemaVersion: 2, MediaType: MediaManifest, Config: config, Layers: layers})
	if err != nil {
		return Descriptor{}, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	manifest.Annotations = map[string]string{AnnotationRefName: tag, AnnotationImage: spec.Ref}
	if err := writeJSON(filepath.Join(dir, "index.json"), Index{SchemaVersion: 2, MediaType: MediaIndex, Manifests: []Descriptor{manifest}}); err != nil {
		return Descriptor{}, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		return Descriptor{}, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	return manifest, nil
}

// writeLayer writes the gzip layer of spec's files and returns its
// descriptor and its uncompressed digest (the config's diff id).
func writeLayer(blobs string, spec ImageSpec, files map[string]string, mtime time.Time) (Descriptor, string, error) {
	tmp, err := os.CreateTemp(blobs, "layer-*")
	if err != nil {
		return Descriptor{}, "", err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	compressed := sha256.New()
	gz, err := gzip.NewWriterLevel(io.MultiWriter(tmp, compressed), gzip.BestSpeed)
	if err != nil {
		return Descriptor{}, "", err
	}
	uncompressed := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(gz, uncompressed))
	dirs := map[string]bool{}
	var mkdirs func(p string) error
	mkdirs = func(p string) error {
		if p == "." || p == "/" || p == "" || dirs[p] {
			return nil
		}
		if err := mkdirs(path.Dir(p)); err != nil {
			return err
		}
		dirs[p] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX})
	}
	// Every image has /tmp, as the distroless images upstream's have.
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
		return Descriptor{}, "", err
	}
	entries := slices.Clone(spec.Files)
	slices.SortFunc(entries, func(a, b ImageFile) int { return strings.Compare(a.Path, b.Path) })
	var links []ImageFile
	// modes are the files' modes, by name: a hard link's header carries
	// its file's, as tar writes it (a runtime applies a link entry's mode
	// to the inode it shares: 0 would make the file unusable).
	modes := map[string]int64{}
	for _, f := range entries {
		name := strings.TrimPrefix(path.Clean(f.Path), "/")
		if err := mkdirs(path.Dir(name)); err != nil {
			return Descriptor{}, "", err
		}
		var err error
		switch {
		case strings.HasSuffix(f.Path, "/"):
			err = mkdirs(name)
		case f.Link != "":
			links = append(links, f) // after every file they may name
			continue
		case f.Binary != "":
			src, ok := files[f.Binary]
			if !ok {
				return Descriptor{}, "", fmt.Errorf("no binary %q for %s", f.Binary, f.Path)
			}
			err = addFile(tw, name, src, cmp.Or(f.Mode, 0o755), mtime, f.Caps...)
			if err == nil && f.Applets {
				var applets []ImageFile
				if applets, err = appletLinks(src, f.Path); err == nil {
					links = append(links, applets...)
				}
			}
		case f.Source != "":
			src, ok := files[sourceKey(f.Source)]
			if !ok {
				return Descriptor{}, "", fmt.Errorf("no source file %q for %s", f.Source, f.Path)
			}
			err = addFile(tw, name, src, cmp.Or(f.Mode, 0o644), mtime, f.Caps...)
		default:
			h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: cmp.Or(f.Mode, 0o644), Size: int64(len(f.Content)), ModTime: mtime, Format: tar.FormatPAX}
			if err = tw.WriteHeader(h); err == nil {
				_, err = io.WriteString(tw, f.Content)
			}
		}
		if err != nil {
			return Descriptor{}, "", err
		}
		switch {
		case f.Binary != "":
			modes[name] = cmp.Or(f.Mode, 0o755)
		case !strings.HasSuffix(f.Path, "/"):
			modes[name] = cmp.Or(f.Mode, 0o644)
		}
	}
	for _, l := range links {
		name := strings.TrimPrefix(path.Clean(l.Path), "/")
		if err := mkdirs(path.Dir(name)); err != nil {
			return Descriptor{}, "", err
		}
		target := strings.TrimPrefix(path.Clean(l.Link), "/")
		mode, ok := modes[target]
		if !ok {
			return Descriptor{}, "", fmt.Errorf("%s: a link to %s, which the image does not have", l.Path, l.Link)
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: mode, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return Descriptor{}, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return Descriptor{}, "", err
	}
	if err := gz.Close(); err != nil {
		return Descriptor{}, "", err
	}
	if err := tmp.Close(); err != nil {
		return Descriptor{}, "", err
	}
	st, err := os.Stat(tmp.Name())
	if err != nil {
		return Descriptor{}, "", err
	}
	d := Descriptor{MediaType: MediaLayer, Digest: digestOf(compressed), Size: st.Size()}
	if err := os.Rename(tmp.Name(), filepath.Join(blobs, strings.TrimPrefix(d.Digest, "sha256:"))); err != nil {
		return Descriptor{}, "", err
	}
	return d, digestOf(uncompressed), nil
}

// writeDownload writes d under dir at its path (a binary, or a gzip
// tarball of binaries at ./NAME with mtime, as upstream's release
// tarballs are) and its sha256 beside it as upstream publishes it: the
// hex digest alone for a binary (dl.k8s.io), "DIGEST  NAME" for a
// tarball (GitHub releases' .sha256 files).
func writeDownload(dir string, d Download, files map[string]string, mtime time.Time) error {
	dst := filepath.Join(dir, filepath.FromSlash(d.Path))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	base := path.Base(d.Path)
	if len(d.Binaries) == 1 && d.Binaries[0] == base {
		src, ok := files[base]
		if !ok {
			return fmt.Errorf("download %s: no binary %q", d.Path, base)
		}
		if err := linkOrCopy(src, dst); err != nil {
			return fmt.Errorf("download %s: %w", d.Path, err)
		}
	} else if err := writeTarball(dst, d, files, mtime); err != nil {
		return fmt.Errorf("download %s: %w", d.Path, err)
	}
	f, err := os.Open(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if len(d.Binaries) != 1 || d.Binaries[0] != base {
		sum += "  " + base + "\n"
	}
	return os.WriteFile(dst+".sha256", []byte(sum), 0o644)
}

// writeTarball writes d's binaries as a gzip tarball at dst, sorted.
func writeTarball(dst string, d Download, files map[string]string, mtime time.Time) error {
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	gz := gzip.NewWriter(out)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
		return err
	}
	for _, name := range slices.Sorted(slices.Values(d.Binaries)) {
		src, ok := files[name]
		if !ok {
			return fmt.Errorf("no binary %q", name)
		}
		if err := addFile(tw, "./"+name, src, 0o755, mtime); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return out.Close()
}

// linkOrCopy puts src's bytes at dst: a hard link when both are on one
// file system, else a copy.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil || errors.Is(err, os.ErrExist) {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// addFile adds src as name, its capabilities (if any) as the
// security.capability extended attribute that setcap writes, in the PAX
// record containerd applies when it unpacks the layer.
func addFile(tw *tar.Writer, name, src string, mode int64, mtime time.Time, caps ...Capability) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: st.Size(), ModTime: mtime, Format: tar.FormatPAX}
	if len(caps) > 0 {
		h.PAXRecords = map[string]string{"SCHILY.xattr.security.capability": string(fileCaps(caps))}
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// sourceKey is the key of a module tree's file in WriteImage's files.
func sourceKey(p string) string { return "source:" + p }

// appletLinks are the hard links busybox --install makes beside the
// busybox binary at bin (its image path is at): one for each applet it
// lists, but itself.
// An image without them would have no shell: none is an error.
func appletLinks(bin, at string) ([]ImageFile, error) {
	out, err := exec.Command(bin, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", at, err)
	}
	var links []ImageFile
	for _, a := range strings.Fields(string(out)) {
		if p := path.Join(path.Dir(at), a); p != at && !strings.Contains(a, "/") {
			links = append(links, ImageFile{Path: p, Link: at})
		}
	}
	if len(links) == 0 {
		return nil, fmt.Errorf("%s --list names no applet", at)
	}
	return links, nil
}

// fileCaps is the value of a security.capability attribute giving caps
// permitted and effective (setcap CAPS=+ep): struct vfs_cap_data,
// revision 2, little endian.
func fileCaps(caps []Capability) []byte {
	var perm [2]uint32
	for _, c := range caps {
		perm[c/32] |= 1 << (c % 32)
	}
	const revision2, effective = 0x02000000, 0x000001
	b := binary.LittleEndian.AppendUint32(nil, revision2|effective)
	for _, w := range perm {
		b = binary.LittleEndian.AppendUint32(b, w)
		b = binary.LittleEndian.AppendUint32(b, 0) // inheritable
	}
	return b
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// writeJSONBlob writes v as a blob and returns its descriptor.
func writeJSONBlob(blobs, mediaType string, v any) (Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Descriptor{}, err
	}
	sum := sha256.Sum256(b)
	d := Descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(b))}
	return d, os.WriteFile(filepath.Join(blobs, hex.EncodeToString(sum[:])), b, 0o644)
}

func writeJSON(p string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}

// Layout is an OCI image layout on disk holding one image.
type Layout struct {
	Dir string
	// Ref is the image's full name and tag (the index's containerd
	// annotation).
	Ref      string
	Manifest Descriptor
}

// ErrBadLayout is returned for a folder that is not a layout WriteImage
// could have written, or whose blobs do not match their digests.
var ErrBadLayout = errors.New("not a valid OCI image layout")

// OpenLayout reads the layout in dir.
func OpenLayout(dir string) (*Layout, error) {
	var idx Index
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadLayout, err)
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("%w: index.json: %w", ErrBadLayout, err)
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].MediaType != MediaManifest || idx.Manifests[0].Annotations[AnnotationImage] == "" {
		return nil, fmt.Errorf("%w: %s: want one named image manifest", ErrBadLayout, dir)
	}
	return &Layout{Dir: dir, Ref: idx.Manifests[0].Annotations[AnnotationImage], Manifest: idx.Manifests[0]}, nil
}

// Blob returns the bytes of a blob, checked against its digest.
func (l *Layout) Blob(d Descriptor) ([]byte, error) {
	hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok || len(hexDigest) != 64 || strings.ContainsAny(hexDigest, "./") {
		return nil, fmt.Errorf("%w: digest %q", ErrBadLayout, d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(l.Dir, "blobs", "sha256", hexDigest))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadLayout, err)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != hexDigest || int64(len(b)) != d.Size {
		return nil, fmt.Errorf("%w: blob %s does not match its digest or size", ErrBadLayout, d.Digest)
	}
	return b, nil
}

// BlobPath is where a blob's bytes are.
func (l *Layout) BlobPath(d Descriptor) string {
	return filepath.Join(l.Dir, "blobs", "sha256", strings.TrimPrefix(d.Digest, "sha256:"))
}

// ReadManifest returns the image's manifest, checked.
func (l *Layout) ReadManifest() (Manifest, []byte, error) {
	b, err := l.Blob(l.Manifest)
	if err != nil {
		return Manifest{}, nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, nil, fmt.Errorf("%w: manifest: %w", ErrBadLayout, err)
	}
	return m, b, nil
}

// Files lists the regular files of the image's layers with their bytes,
// by path: what a container of it sees (for tests and checks).
func (l *Layout) Files() (map[string][]byte, error) {
	m, _, err := l.ReadManifest()
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, d := range m.Layers {
		b, err := l.Blob(d)
		if err != nil {
			return nil, err
		}
		gz, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%w: layer %s: %w", ErrBadLayout, d.Digest, err)
		}
		tr := tar.NewReader(gz)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%w: layer %s: %w", ErrBadLayout, d.Digest, err)
			}
			if h.Typeflag == tar.TypeReg {
				data, err := io.ReadAll(tr)
				if err != nil {
					return nil, fmt.Errorf("%w: layer %s: %w", ErrBadLayout, d.Digest, err)
				}
				out["/"+h.Name] = data
			}
		}
	}
	return out, nil
}
