package cloud

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/snapshots"
	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/volumes"
	"github.com/gophercloud/gophercloud/v2/pagination"

	"opke.dev/opke/diff"
)

// CSIClusterKey is the metadata key the Cinder CSI driver puts on every
// volume and snapshot it makes, with its --cluster flag's value (OPKE
// renders the cluster's name there). KeepKey, set to "true" on a volume
// (openstack volume set --property opke.dev/keep=true VOLUME), keeps it
// and its snapshots when the cluster is deleted.
const (
	CSIClusterKey = "cinder.csi.openstack.org/cluster"
	KeepKey       = "opke.dev/keep"
)

// The metadata the CSI provisioner adds with --extra-create-metadata: the
// claim the volume was made for.
const (
	pvcNameKey      = "csi.storage.k8s.io/pvc/name"
	pvcNamespaceKey = "csi.storage.k8s.io/pvc/namespace"
)

// A volume or a snapshot of the cluster's CSI driver: deleted only, with
// the cluster; observed by ClusterVolumes, only then. A volume's deletion
// waits for Nova to detach it (its server's deletion does), a snapshot's
// until it is gone (Cinder refuses to delete a volume that has one, even
// one being deleted), a volume's until it is gone too, so that the
// cluster is forgotten only once nothing of it is billed.
var (
	volumeKind = kind{
		delete: func(a *Applier, ctx context.Context, id string, r diff.Resource) error {
			bs, err := a.blockStorage()
			if err != nil {
				return err
			}
			if err := a.waitVolume(ctx, bs, id, detached); err != nil {
				return err
			}
			if err := volumes.Delete(ctx, bs, id, volumes.DeleteOpts{}).ExtractErr(); err != nil {
				return err
			}
			return a.waitVolume(ctx, bs, id, nil)
		},
	}
	snapshotKind = kind{
		delete: func(a *Applier, ctx context.Context, id string, r diff.Resource) error {
			bs, err := a.blockStorage()
			if err != nil {
				return err
			}
			if err := snapshots.Delete(ctx, bs, id).ExtractErr(); err != nil {
				return err
			}
			return poll(ctx, a.PollEvery, func() (bool, error) {
				sn, err := snapshots.Get(ctx, bs, id).Extract()
				switch {
				case gophercloud.ResponseCodeIs(err, http.StatusNotFound):
					return true, nil
				case err != nil:
					return false, err
				case sn.Status == "error_deleting":
					return false, fmt.Errorf("snapshot %s: status %s: Cinder could not delete it", id, sn.Status)
				}
				return false, nil
			})
		},
	}
)

func (a *Applier) blockStorage() (*gophercloud.ServiceClient, error) {
	if a.c.BlockStorage == nil {
		return nil, fmt.Errorf("the cloud's catalog has no block-storage (Cinder v3) endpoint")
	}
	return a.c.BlockStorage, nil
}

// detached accepts a volume Cinder lets be deleted: not attached, not on
// its way in or out of an attachment, not being made or extended.
func detached(v *volumes.Volume) (bool, error) {
	switch v.Status {
	case "available", "error", "error_restoring", "error_extending", "error_managing":
		return true, nil
	case "in-use", "attaching", "detaching", "reserved", "creating", "extending", "downloading", "uploading", "deleting", "maintenance", "backing-up", "restoring-backup":
		return false, nil
	}
	return false, fmt.Errorf("volume %s: status %s: Cinder does not delete it", v.ID, v.Status)
}

// waitVolume waits until the volume is as ok wants it (nil: gone).
func (a *Applier) waitVolume(ctx context.Context, bs *gophercloud.ServiceClient, id string, ok func(*volumes.Volume) (bool, error)) error {
	return poll(ctx, a.PollEvery, func() (bool, error) {
		v, err := volumes.Get(ctx, bs, id).Extract()
		switch {
		case gophercloud.ResponseCodeIs(err, http.StatusNotFound) && ok == nil:
			return true, nil
		case err != nil:
			return false, err // a 404 before the deletion: Delete takes it as done
		case ok == nil && v.Status == "error_deleting":
			return false, fmt.Errorf("volume %s: status %s: Cinder could not delete it", id, v.Status)
		case ok == nil:
			return false, nil
		}
		return ok(v)
	})
}

// ClusterVolumes lists what the cluster's Cinder CSI driver made: the
// volumes whose CSIClusterKey is the cluster's name, and their snapshots,
// but those kept (KeepKey). Like the Service load balancers, OPKE neither
// makes nor tags them, never takes them for drift, and deletes them only
// with the cluster (deletionPolicy Delete); two listings of the project,
// made only for a cluster being deleted. A cloud without Cinder has none.
func ClusterVolumes(ctx context.Context, c *Clients, cluster string) ([]diff.Resource, error) {
	if c.BlockStorage == nil {
		return nil, nil
	}
	var out []diff.Resource
	names := map[string]string{} // volume id -> its name in the plan
	kept := map[string]bool{}
	err := each(ctx, "volumes", volumes.List(c.BlockStorage, volumes.ListOpts{Limit: pageSize}), func(p pagination.Page) error {
		list, err := volumes.ExtractVolumes(p)
		for _, v := range list {
			if v.Metadata[CSIClusterKey] != cluster {
				continue
			}
			if v.Metadata[KeepKey] == "true" {
				kept[v.ID] = true
				continue
			}
			name := volumeName(v.Name, v.ID)
			names[v.ID] = name
			made := "Cinder CSI driver"
			if claim := v.Metadata[pvcNameKey]; claim != "" {
				made += ", PersistentVolumeClaim " + v.Metadata[pvcNamespaceKey] + "/" + claim
			}
			out = append(out, diff.Resource{Kind: diff.KindVolume, Name: name, ID: v.ID, Attrs: diff.Attrs{
				"size": diff.Known(fmt.Sprint(v.Size)), "status": diff.Known(v.Status), "made_by": diff.Known(made)}})
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	err = each(ctx, "volume snapshots", snapshots.List(c.BlockStorage, snapshots.ListOpts{Limit: pageSize}), func(p pagination.Page) error {
		list, err := snapshots.ExtractSnapshots(p)
		for _, sn := range list {
			volume, ours := names[sn.VolumeID]
			if kept[sn.VolumeID] || (!ours && sn.Metadata[CSIClusterKey] != cluster) {
				continue
			}
			attrs := diff.Attrs{"size": diff.Known(fmt.Sprint(sn.Size)), "status": diff.Known(sn.Status), "made_by": diff.Known("Cinder CSI driver")}
			if ours {
				attrs["volume"] = diff.Known(volume)
			}
			out = append(out, diff.Resource{Kind: diff.KindSnapshot, Name: volumeName(sn.Name, sn.ID), ID: sn.ID, Attrs: attrs})
		}
		return err
	})
	slices.SortFunc(out, func(a, b diff.Resource) int { return a.Address().Compare(b.Address()) })
	return out, err
}

// volumeName is a volume's or snapshot's name in the plan: Cinder's name
// (the CSI driver's are unique: pvc-<uid>, snapshot-<uid>), else its id.
func volumeName(name, id string) string {
	if name == "" {
		return id
	}
	return name
}
