package backup

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// FuzzRecordFrom: a record read back from any metadata Swift returns
// never panics, and one written by metadata reads back as it was, in
// whatever case the keys come.
func FuzzRecordFrom(f *testing.F) {
	taken := time.Date(2026, 11, 21, 10, 0, 0, 123e6, time.UTC)
	want := &Record{ID: newID(taken, 42), Cluster: "demo", Reason: ReasonScheduled, Taken: taken, Revision: 42, Hash: 7, TotalKeys: 9,
		Keys: 5, Size: 2048, SHA256: "ab", Container: "c", Object: objectName("demo", newID(taken, 42))}
	m := want.metadata()
	f.Add(want.Object, m[metaSHA256], m[metaRevision], m[metaHash], m[metaKeys], m[metaTaken], true)
	f.Add("demo/x.db", "ab", "-1", "99999999999", "x", "yesterday", false)
	f.Fuzz(func(t *testing.T, object, sum, rev, hash, keys, takenText string, prefixed bool) {
		meta := map[string]string{metaSHA256: sum, metaRevision: rev, metaHash: hash, metaKeys: keys,
			metaTotalKeys: "9", metaReason: ReasonScheduled, metaTaken: takenText}
		if prefixed {
			as := map[string]string{}
			for k, v := range meta {
				as["X-Object-Meta-"+k] = v
			}
			meta = as
		}
		_, _ = recordFrom("c", object, 2048, meta)
	})
}

func TestRecordRoundTrip(t *testing.T) {
	taken := time.Date(2026, 11, 21, 10, 0, 0, 123e6, time.UTC)
	want := &Record{ID: newID(taken, 42), Cluster: "demo", Reason: ReasonBeforeRollout, Taken: taken, Revision: 42, Hash: 7, TotalKeys: 9,
		Keys: 5, Size: 2048, SHA256: "ab", Container: "c", Object: objectName("demo", newID(taken, 42)), Sealed: true}
	meta := map[string]string{}
	for k, v := range want.metadata() {
		meta["X-Object-Meta-"+k] = v // as Swift returns them
	}
	got, err := recordFrom("c", want.Object, 2048, meta)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("record read back (-want +got):\n%s", d)
	}
	if _, err := recordFrom("c", "demo/notes.txt", 1, meta); err == nil {
		t.Error("an object that is not a snapshot read as one")
	}
}
