package assets

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MinFlatcar is the oldest Flatcar Container Linux release whose hosts run
// what OPKE renders: containerd 2.x (its configuration is version 3, the
// CRI's plugins io.containerd.cri.v1.*) and cgroup v2. OPKE reads a host's /etc/os-release at first contact and
// refuses an older one (CheckOSRelease) before anything is pushed to it.
const MinFlatcar = "4459.2.0"

// OSRelease is what a host's /etc/os-release says of it.
type OSRelease struct {
	ID, VersionID, PrettyName string
}

// ErrUnsupportedHost is a host whose OS OPKE does not render for.
var ErrUnsupportedHost = errors.New("unsupported host")

// shellUnescape undoes the escapes os-release(5) allows in double quotes.
var shellUnescape = strings.NewReplacer(`\\`, `\`, `\"`, `"`, `\$`, `$`, "\\`", "`")

// ParseOSRelease reads os-release(5): KEY=VALUE lines, values optionally
// quoted with shell quoting; comments and blank lines skipped.
func ParseOSRelease(b []byte) OSRelease {
	var r OSRelease
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			q := v[0]
			v = v[1 : len(v)-1]
			if q == '"' {
				v = shellUnescape.Replace(v)
			}
		}
		switch k {
		case "ID":
			r.ID = v
		case "VERSION_ID":
			r.VersionID = v
		case "PRETTY_NAME":
			r.PrettyName = v
		}
	}
	return r
}

// CheckOSRelease says whether a host whose /etc/os-release is b runs what
// OPKE renders: Flatcar Container Linux MinFlatcar or later.
func CheckOSRelease(b []byte) error {
	r := ParseOSRelease(b)
	name := r.PrettyName
	if name == "" {
		name = strings.TrimSpace(r.ID + " " + r.VersionID)
	}
	if r.ID != "flatcar" {
		return fmt.Errorf("%w: the host runs %q, not Flatcar Container Linux (%s or later): its image is not one OPKE renders for", ErrUnsupportedHost, name, MinFlatcar)
	}
	older, err := releaseBefore(r.VersionID, MinFlatcar)
	if err != nil {
		return fmt.Errorf("%w: the host's Flatcar release %q: %v", ErrUnsupportedHost, r.VersionID, err)
	}
	if older {
		return fmt.Errorf("%w: the host runs Flatcar %s; OPKE needs Flatcar %s or later (containerd 2): use a newer image", ErrUnsupportedHost, r.VersionID, MinFlatcar)
	}
	return nil
}

// releaseBefore compares Flatcar release numbers MAJOR.MINOR.PATCH.
func releaseBefore(a, b string) (bool, error) {
	pa, err := releaseParts(a)
	if err != nil {
		return false, err
	}
	pb, err := releaseParts(b)
	if err != nil {
		return false, err
	}
	for i := range pa {
		if pa[i] != pb[i] {
			return pa[i] < pb[i], nil
		}
	}
	return false, nil
}

func releaseParts(s string) ([3]int, error) {
	var p [3]int
	fields := strings.Split(s, ".")
	if len(fields) != 3 {
		return p, fmt.Errorf("not MAJOR.MINOR.PATCH")
	}
	for i, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return p, fmt.Errorf("not MAJOR.MINOR.PATCH")
		}
		p[i] = n
	}
	return p, nil
}
