package backup

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"

	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/objectstorage/v1/containers"
	"github.com/gophercloud/gophercloud/v2/openstack/objectstorage/v1/objects"
	"github.com/gophercloud/gophercloud/v2/pagination"
)

// Objects is the Swift container that holds snapshots.
type Objects struct {
	Client    *gophercloud.ServiceClient
	Container string
}

// Put uploads a snapshot file as rec.Object, with rec in its metadata;
// the container is made if missing. Putting the same record twice
// writes the same object: a retried step leaves one copy.
func (o Objects) Put(ctx context.Context, rec *Record, path string) error {
	if _, err := containers.Create(ctx, o.Client, o.Container, containers.CreateOpts{}).Extract(); err != nil {
		return fmt.Errorf("swift container %s: %w", o.Container, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = objects.Create(ctx, o.Client, o.Container, rec.Object, objects.CreateOpts{
		Content: f, ContentType: "application/octet-stream", Metadata: rec.metadata(),
	}).Extract()
	if err != nil {
		return fmt.Errorf("upload %s/%s: %w", o.Container, rec.Object, err)
	}
	return nil
}

// List returns the snapshots of cluster the container holds, oldest
// first, read from the objects' metadata. A missing container holds none.
func (o Objects) List(ctx context.Context, cluster string) ([]*Record, error) {
	var out []*Record
	err := objects.List(o.Client, o.Container, objects.ListOpts{Prefix: cluster + "/"}).EachPage(ctx, func(ctx context.Context, page pagination.Page) (bool, error) {
		infos, err := objects.ExtractInfo(page)
		if err != nil {
			return false, err
		}
		for _, info := range infos {
			if !strings.HasSuffix(info.Name, ".db") {
				continue
			}
			meta, err := objects.Get(ctx, o.Client, o.Container, info.Name, nil).ExtractMetadata()
			if err != nil {
				return false, fmt.Errorf("%s/%s: %w", o.Container, info.Name, err)
			}
			rec, err := recordFrom(o.Container, info.Name, info.Bytes, meta)
			if err != nil {
				return false, err
			}
			out = append(out, rec)
		}
		return true, nil
	})
	if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s/%s/: %w", o.Container, cluster, err)
	}
	slices.SortFunc(out, func(a, b *Record) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// Download fetches a snapshot into a new file in dir and checks its
// sha256 against the object's metadata: [ErrCorrupt] if they differ.
func (o Objects) Download(ctx context.Context, rec *Record, dir string) (string, error) {
	res := objects.Download(ctx, o.Client, o.Container, rec.Object, nil)
	if res.Err != nil {
		if gophercloud.ResponseCodeIs(res.Err, http.StatusNotFound) {
			return "", fmt.Errorf("%s/%s: %w", o.Container, rec.Object, ErrNotFound)
		}
		return "", fmt.Errorf("download %s/%s: %w", o.Container, rec.Object, res.Err)
	}
	defer res.Body.Close()
	f, err := os.CreateTemp(dir, "download-*.db")
	if err != nil {
		return "", err
	}
	sum := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, sum), res.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("download %s/%s: %w", o.Container, rec.Object, err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != rec.SHA256 {
		os.Remove(f.Name())
		return "", fmt.Errorf("%s/%s: sha256 %s, the record says %s: %w", o.Container, rec.Object, got, rec.SHA256, ErrCorrupt)
	}
	return f.Name(), nil
}

// Delete removes a snapshot's object; one already gone is no error.
func (o Objects) Delete(ctx context.Context, rec *Record) error {
	_, err := objects.Delete(ctx, o.Client, o.Container, rec.Object, nil).Extract()
	if err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		return fmt.Errorf("delete %s/%s: %w", o.Container, rec.Object, err)
	}
	return nil
}

// Expired returns, of a cluster's snapshots sorted oldest first, those
// past retention: all but the newest retain scheduled or manual ones and
// the newest one taken before a rollout (the one a failed upgrade
// restores).
func Expired(recs []*Record, retain int) []*Record {
	var regular []*Record
	var rollout []*Record
	for _, r := range recs {
		if r.Reason == ReasonBeforeRollout {
			rollout = append(rollout, r)
		} else {
			regular = append(regular, r)
		}
	}
	var out []*Record
	if n := len(regular) - max(retain, 1); n > 0 {
		out = append(out, regular[:n]...)
	}
	if n := len(rollout) - 1; n > 0 {
		out = append(out, rollout[:n]...)
	}
	slices.SortFunc(out, func(a, b *Record) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Find returns the record of id among recs.
func Find(recs []*Record, id string) (*Record, error) {
	for _, r := range recs {
		if r.ID == id {
			return r, nil
		}
	}
	return nil, fmt.Errorf("snapshot %s: %w", id, ErrNotFound)
}
