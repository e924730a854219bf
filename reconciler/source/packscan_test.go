package source_test

import (
	"bytes"
	"compress/zlib"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"opke.dev/opke/internal/gittest"
	"opke.dev/opke/reconciler/source"
)

// gitPack is the pack git pack-objects makes of a repository's history:
// a file edited over three commits (deltas against its earlier versions:
// offset deltas with ofsDelta, else deltas by name) and a blob of 4 MiB
// of zeros.
func gitPack(t *testing.T, ofsDelta bool) []byte {
	t.Helper()
	dir := t.TempDir()
	repo := gittest.Init(t, dir)
	var text strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&text, "line %d of a spec long enough to be worth a delta\n", i)
	}
	gittest.Commit(t, repo, "one", gittest.Files(map[string]string{"spec.yaml": text.String()}))
	gittest.Commit(t, repo, "two", gittest.Files(map[string]string{"spec.yaml": text.String() + "two\n"}))
	gittest.Commit(t, repo, "three", gittest.Files(map[string]string{"spec.yaml": text.String() + "two\nthree\n", "zeros": string(make([]byte, 4<<20))}))
	args := []string{"pack-objects", "--stdout", "--revs", "-q"}
	if ofsDelta {
		args = append(args, "--delta-base-offset")
	}
	cmd := exec.CommandContext(t.Context(), "git", args...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader("HEAD\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git pack-objects: %v", err)
	}
	// The pack has deltas of the kind asked for.
	file := filepath.Join(t.TempDir(), "p.pack")
	idx := exec.CommandContext(t.Context(), "git", "index-pack", "--stdin", file)
	idx.Dir = dir
	idx.Stdin = bytes.NewReader(out)
	if err := idx.Run(); err != nil {
		t.Fatalf("git index-pack: %v", err)
	}
	verify, err := exec.CommandContext(t.Context(), "git", "verify-pack", "-v", file).Output()
	if err != nil {
		t.Fatalf("git verify-pack: %v", err)
	}
	if !strings.Contains(string(verify), "chain length = 1:") {
		t.Fatalf("git's pack has no delta:\n%s", verify)
	}
	return out
}

// packObject is one object of a pack: its header (type, declared size)
// and its zlib stream of data.
func packObject(typ byte, declared int, prefix []byte, data []byte) []byte {
	var out bytes.Buffer
	b := typ<<4 | byte(declared&15)
	declared >>= 4
	for declared > 0 {
		out.WriteByte(b | 0x80)
		b = byte(declared & 0x7f)
		declared >>= 7
	}
	out.WriteByte(b)
	out.Write(prefix)
	z := zlib.NewWriter(&out)
	z.Write(data)
	z.Close()
	return out.Bytes()
}

// pack is a pack of the objects, with a trailer of zeros.
func pack(objects ...[]byte) []byte {
	var out bytes.Buffer
	out.WriteString("PACK")
	binary.Write(&out, binary.BigEndian, uint32(2))
	binary.Write(&out, binary.BigEndian, uint32(len(objects)))
	for _, o := range objects {
		out.Write(o)
	}
	out.Write(make([]byte, 20))
	return out.Bytes()
}

// delta is a delta's instructions: its base's and its target's sizes,
// then one insertion of a byte.
func delta(base, target uint64) []byte {
	b := binary.AppendUvarint(nil, base)
	b = binary.AppendUvarint(b, target)
	return append(b, 1, 'x')
}

func TestScanPack(t *testing.T) {
	t.Parallel()
	ofs, byName := gitPack(t, true), gitPack(t, false)
	noise := make([]byte, 64<<10)
	rand.Read(noise)
	blob := func(data []byte) []byte { return packObject(3, len(data), nil, data) }
	base := make([]byte, 20)
	// A delta whose instructions (zeros: not a valid delta, which the
	// scan does not ask) inflate to 1 MiB, making an object of one byte.
	bigDelta := packObject(7, 1<<20, base, append(delta(10, 1), make([]byte, 1<<20-len(delta(10, 1)))...))
	for _, tt := range []struct {
		name string
		pack []byte
		lim  source.PackLimits
		// want: "" passes; else the error says it (and is
		// ErrPackTooLarge when bound).
		want  string
		bound bool
	}{
		{name: "git's pack, offset deltas", pack: ofs, lim: source.PackLimits{MaxObject: 4 << 20, MaxTotal: 5 << 20}},
		{name: "git's pack, deltas by name", pack: byName, lim: source.PackLimits{MaxObject: 4 << 20, MaxTotal: 5 << 20}},
		{name: "git's pack, its zeros over the object bound", pack: ofs, lim: source.PackLimits{MaxObject: 4<<20 - 1, MaxTotal: 64 << 20},
			want: "(a blob): the fetch holds more than its limit once inflated: it declares 4 MiB, over 3 MiB", bound: true},
		{name: "git's pack over the total", pack: byName, lim: source.PackLimits{MaxObject: 4 << 20, MaxTotal: 4 << 20},
			want: "its objects make more than 4 MiB", bound: true},
		{name: "objects each within, together over", pack: pack(blob(noise), blob(noise), blob(noise)), lim: source.PackLimits{MaxObject: 64 << 10, MaxTotal: 140 << 10},
			want: "its objects make more than 140 KiB (at object 3 of 3)", bound: true},
		{name: "objects each within, no total bound (the tracked branch's)", pack: pack(blob(noise), blob(noise), blob(noise)), lim: source.PackLimits{MaxObject: 64 << 10}},
		{name: "deltas of large instructions and small results", pack: pack(bigDelta, bigDelta, bigDelta), lim: source.PackLimits{MaxObject: 2 << 20, MaxTotal: 2 << 20},
			want: "its objects make more than 2 MiB (at object 2 of 3)", bound: true},
		{name: "many empty objects", pack: pack(slices.Repeat([][]byte{blob(nil)}, 2000)...), lim: source.PackLimits{MaxObject: 1 << 20, MaxTotal: 1 << 20},
			want: "it holds 2000 objects, over the 1024 its bound of 1 MiB allows", bound: true},
		{name: "a delta that makes an object over the bound", pack: pack(packObject(7, len(delta(10, 600<<20)), base, delta(10, 600<<20))), lim: source.PackLimits{MaxObject: 32 << 20, MaxTotal: 64 << 20},
			want: "object 1 of 1 (a delta): the fetch holds more than its limit once inflated: it makes an object of 600 MiB, over 32 MiB", bound: true},
		{name: "an offset delta within", pack: pack(blob([]byte("0123456789")), packObject(6, len(delta(10, 1)), []byte{11}, delta(10, 1))), lim: source.PackLimits{MaxObject: 32, MaxTotal: 64 << 10}},
		{name: "a header that declares less than it inflates to", pack: pack(packObject(3, 10, nil, make([]byte, 1<<20))), lim: source.PackLimits{MaxObject: 32 << 20, MaxTotal: 64 << 20},
			want: "it inflates past the 10 bytes it declares", bound: true},
		{name: "a header that declares more", pack: pack(packObject(3, 100, nil, make([]byte, 10))), lim: source.PackLimits{MaxObject: 32 << 20, MaxTotal: 64 << 20},
			want: "it inflates to 10 bytes, not the 100 it declares"},
		{name: "an unknown type", pack: pack(packObject(5, 1, nil, []byte("x"))), lim: source.PackLimits{MaxObject: 32, MaxTotal: 64 << 10}, want: "object 1 of 1: type 5"},
		{name: "cut short", pack: ofs[:len(ofs)/2], lim: source.PackLimits{MaxObject: 32 << 20, MaxTotal: 64 << 20}, want: "unexpected EOF"},
		{name: "not a pack", pack: []byte("PACX\x00\x00\x00\x02\x00\x00\x00\x00"), lim: source.PackLimits{MaxObject: 1, MaxTotal: 1}, want: "not a pack"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := source.ScanPack(bytes.NewReader(tt.pack), tt.lim)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("ScanPack: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("ScanPack: %v, want an error saying %q", err, tt.want)
			case errors.Is(err, source.ErrPackTooLarge) != tt.bound:
				t.Fatalf("ScanPack: %v: ErrPackTooLarge %t, want %t", err, errors.Is(err, source.ErrPackTooLarge), tt.bound)
			}
		})
	}
}

// FuzzScanPack: any input ends, with nil or an error, and never panics;
// a pack whose objects are within the bounds stays within them with any
// bytes after it.
func FuzzScanPack(f *testing.F) {
	f.Add(pack(packObject(3, 10, nil, []byte("0123456789")), packObject(6, len(delta(10, 1)), []byte{11}, delta(10, 1))))
	f.Add(pack(packObject(7, len(delta(10, 600<<20)), make([]byte, 20), delta(10, 600<<20))))
	f.Add(pack(packObject(3, 10, nil, make([]byte, 4096))))
	f.Fuzz(func(t *testing.T, b []byte) {
		lim := source.PackLimits{MaxObject: 1 << 20, MaxTotal: 2 << 20}
		err := source.ScanPack(bytes.NewReader(b), lim)
		if err == nil {
			if err := source.ScanPack(bytes.NewReader(append(append([]byte(nil), b...), 0xff, 0xff)), lim); err != nil {
				t.Fatalf("a pack that passed fails with bytes after it: %v", err)
			}
		}
	})
}
