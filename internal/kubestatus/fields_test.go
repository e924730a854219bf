package kubestatus

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFields(t *testing.T) {
	t.Parallel()
	const opkeSet = `{"f:data":{"f:a":{}}}`
	obj := func(entries string) []byte {
		return []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","managedFields":[` + entries + `]}}`)
	}
	apply := `{"manager":"opke","operation":"Apply","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":` + opkeSet + `}`
	digest := func(t *testing.T, b []byte) string {
		t.Helper()
		d, err := Fields(b, "opke")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	want := digest(t, obj(apply))
	for _, tc := range []struct {
		name    string
		obj     []byte
		same    bool
		none    bool
		others  []Manager
		wantErr bool
	}{
		{name: "opke's apply alone", obj: obj(apply), same: true},
		{name: "spacing is not a change", obj: obj(`{"manager":"opke","operation":"Apply","fieldsV1": { "f:data" : { "f:a" : { } } } }`), same: true},
		{name: "a status writer and opke's own update are not its apply",
			obj: obj(apply + `,{"manager":"kube-controller-manager","operation":"Update","subresource":"status","fieldsV1":{"f:status":{}}},` +
				`{"manager":"opke","operation":"Update","fieldsV1":{"f:metadata":{"f:annotations":{}}}}`), same: true},
		{name: "others sorted once each",
			obj: obj(`{"manager":"kubectl-edit","operation":"Update","fieldsV1":{"f:data":{"f:a":{}}}},` +
				`{"manager":"opke","operation":"Apply","fieldsV1":{"f:data":{}}},{"manager":"b-tool","operation":"Apply","fieldsV1":{}},` +
				`{"manager":"b-tool","operation":"Update","fieldsV1":{"f:metadata":{"f:labels":{"f:a/b":{}}}}}`),
			others: []Manager{{Name: "b-tool", Fields: []string{".metadata.labels.a/b"}}, {Name: "kubectl-edit", Fields: []string{".data.a"}}}},
		{name: "no apply of opke", obj: obj(`{"manager":"kubectl-edit","operation":"Update","fieldsV1":` + opkeSet + `}`), none: true, others: []Manager{{Name: "kubectl-edit", Fields: []string{".data.a"}}}},
		{name: "no managedFields", obj: []byte(`{"metadata":{"name":"x"}}`), none: true},
		{name: "not JSON", obj: []byte(`{"metadata":`), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Fields(tc.obj, "opke")
			others, merr := Managers(tc.obj, "opke")
			if (err != nil) != tc.wantErr || (merr != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %t", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if (d == want) != tc.same || (d == "") != tc.none {
				t.Errorf("digest %q: same as the apply's %t (want %t), none %t (want %t)", d, d == want, tc.same, d == "", tc.none)
			}
			if diff := cmp.Diff(tc.others, others); diff != "" {
				t.Errorf("other managers (-want +got):\n%s", diff)
			}
		})
	}
}
