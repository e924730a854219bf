package world

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"opke.dev/opke/render/assets"
)

// MirrorName is where an image is in a registry mirror laid out as OPKE's
// spec.registryMirror says: registry.k8s.io/pause:3.10.1 is
// PATH/registry.k8s.io/pause:3.10.1. It returns the repository and tag.
func MirrorName(ref, path string) (repo, tag string, err error) {
	tag, ok := assets.ImageTag(ref)
	if !ok {
		return "", "", fmt.Errorf("image %q: no tag", ref)
	}
	name := strings.TrimSuffix(ref, ":"+tag)
	if !strings.Contains(name, "/") {
		return "", "", fmt.Errorf("image %q: no registry", ref)
	}
	return assets.MirrorRepository(path, name), tag, nil
}

// Push uploads the image of an OCI layout to the registry at base
// (https://host:port) as repo:tag, with the distribution API: blobs the
// registry has are not sent again, the manifest last.
func Push(ctx context.Context, client *http.Client, base string, l *Layout, repo, tag string) error {
	m, raw, err := l.ReadManifest()
	if err != nil {
		return err
	}
	for _, d := range append([]Descriptor{m.Config}, m.Layers...) {
		if err := pushBlob(ctx, client, base, repo, l, d); err != nil {
			return fmt.Errorf("push %s:%s: %w", repo, tag, err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/v2/"+repo+"/manifests/"+tag, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", MediaManifest)
	if err := expect(client.Do(req)); err != nil {
		return fmt.Errorf("push %s:%s: manifest: %w", repo, tag, err)
	}
	return nil
}

// PushAll pushes every image b holds to the mirror at base, under path
// (MirrorName), calling pushed after each.
func (b *Built) PushAll(ctx context.Context, client *http.Client, base, path string, pushed func(ref, repo, tag string)) error {
	for _, ref := range b.Images() {
		dir, _ := b.Image(ref)
		l, err := OpenLayout(dir)
		if err != nil {
			return err
		}
		repo, tag, err := MirrorName(ref, path)
		if err != nil {
			return err
		}
		if err := Push(ctx, client, base, l, repo, tag); err != nil {
			return err
		}
		if pushed != nil {
			pushed(ref, repo, tag)
		}
	}
	return nil
}

func pushBlob(ctx context.Context, client *http.Client, base, repo string, l *Layout, d Descriptor) error {
	head, err := http.NewRequestWithContext(ctx, http.MethodHead, base+"/v2/"+repo+"/blobs/"+d.Digest, nil)
	if err != nil {
		return err
	}
	if resp, err := client.Do(head); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
	}
	start, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v2/"+repo+"/blobs/uploads/", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(start)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("start upload: %s", resp.Status)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		return fmt.Errorf("upload location: %w", err)
	}
	b, err := url.Parse(base)
	if err != nil {
		return err
	}
	loc = b.ResolveReference(loc)
	q := loc.Query()
	q.Set("digest", d.Digest)
	loc.RawQuery = q.Encode()
	f, err := os.Open(l.BlobPath(d))
	if err != nil {
		return err
	}
	defer f.Close()
	put, err := http.NewRequestWithContext(ctx, http.MethodPut, loc.String(), f)
	if err != nil {
		return err
	}
	put.ContentLength = d.Size
	put.Header.Set("Content-Type", "application/octet-stream")
	if err := expect(client.Do(put)); err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	return nil
}

// expect reads a response and fails unless it is a 2xx.
func expect(resp *http.Response, err error) error {
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
