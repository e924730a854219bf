package cloud

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// stdPage is a page decoded whole by encoding/json: what decodePage must
// agree with.
func stdPage(body []byte, key string) (items []secGroupView, next string, err error) {
	var page map[string]json.RawMessage
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, "", err
	}
	if raw, ok := page[key]; ok {
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, "", err
		}
	}
	if raw, ok := page[key+"_links"]; ok {
		var links []struct{ Href, Rel string }
		if err := json.Unmarshal(raw, &links); err != nil {
			return nil, "", err
		}
		for _, l := range links {
			if l.Rel == "next" {
				next = l.Href
			}
		}
	}
	return items, next, nil
}

var pageSeeds = []string{
	`{"security_groups": [{"id": "a", "name": "prod-nodes", "tags": ["opke-cluster=prod"], "security_group_rules": [{"id": "r", "direction": "ingress", "protocol": "tcp", "port_range_min": 22, "port_range_max": 22, "remote_ip_prefix": "0.0.0.0/0", "remote_group_id": null}]}], "security_groups_links": [{"rel": "next", "href": "http://127.0.0.1/v2.0/security-groups?marker=a"}]}`,
	`{"security_groups": [], "other": {"deep": [1, 2, {"x": null}]}}`,
	`{"security_groups_links": [{"rel": "previous", "href": "p"}], "security_groups": [{"id": "b", "extra": true}]}`,
	`{"security_groups": [{"ID": "case", "Name": "insensitive"}]}`,
	`[]`,
	`{"security_groups": [{"id": 7}]}`,
	`{"security_groups": [`,
	`{}`,
	``,
}

// TestDecodePage: pages as Neutron writes them, and pages no cloud
// should write, decode as encoding/json decodes them whole, or fail.
func TestDecodePage(t *testing.T) {
	t.Parallel()
	for _, body := range pageSeeds {
		items, next, err := decodePage[secGroupView](strings.NewReader(body), "security_groups")
		want, wantNext, wantErr := stdPage([]byte(body), "security_groups")
		if (err != nil) != (wantErr != nil) {
			t.Errorf("%.40s: error %v, encoding/json's %v", body, err, wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if d := cmp.Diff(want, items); d != "" || next != wantNext {
			t.Errorf("%.40s: items (-encoding/json +decodePage):\n%s next %q, want %q", body, d, next, wantNext)
		}
	}
}

// FuzzDecodePage: whatever a cloud answers, decodePage does not panic,
// and what it decodes of a valid page is what encoding/json decodes.
func FuzzDecodePage(f *testing.F) {
	for _, s := range pageSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		items, next, err := decodePage[secGroupView](bytes.NewReader(body), "security_groups")
		want, wantNext, wantErr := stdPage(body, "security_groups")
		if err != nil || wantErr != nil || duplicateKeys(body) || !utf8.Valid(body) {
			// The two may disagree on what is broken (json-iterator
			// stops at the first error, encoding/json validates all
			// first); a page either refuses is not planned from. An
			// object that names a key twice, the second time null, keeps
			// the first value in encoding/json and none in json-iterator;
			// a string that is not UTF-8 has its bad bytes replaced in
			// encoding/json, kept in json-iterator: no cloud writes
			// either, and neither names a resource of OPKE's.
			return
		}
		if d := cmp.Diff(want, items); d != "" || next != wantNext {
			t.Errorf("items (-encoding/json +decodePage):\n%s next %q, want %q", d, next, wantNext)
		}
	})
}

// duplicateKeys reports whether an object of the JSON text names a key
// twice.
func duplicateKeys(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		object, key bool // in an object, and next token is a key
		seen        map[string]bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if k, ok := tok.(string); ok {
				if top.seen[k] {
					return true
				}
				top.seen[k] = true
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, key: true, seen: map[string]bool{}})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: in an object, a key comes next.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true
		}
	}
}
