package schemas

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// supportedMinors are the Kubernetes minors OPKE renders assets for, oldest first.
var supportedMinors = []string{"1.30", "1.31", "1.32", "1.33", "1.34", "1.35", "1.36"}

// SupportedMinors returns a copy of supportedMinors: no caller can rewrite the package's own.
func SupportedMinors() []string {
	return slices.Clone(supportedMinors)
}

// Version is a Kubernetes release, vMAJOR.MINOR.PATCH.
type Version struct{ Major, Minor, Patch int }

var versionRE = regexp.MustCompile(`^v(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})$`)

// ParseVersion parses vMAJOR.MINOR.PATCH.
func ParseVersion(s string) (Version, error) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return Version{}, fmt.Errorf("version %q: not of the form vMAJOR.MINOR.PATCH", s)
	}
	var v Version
	for i, dst := range []*int{&v.Major, &v.Minor, &v.Patch} {
		*dst, _ = strconv.Atoi(m[i+1]) // the pattern admits only small decimals
	}
	return v, nil
}

// String returns vMAJOR.MINOR.PATCH.
func (v Version) String() string { return fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch) }

// MinorString returns MAJOR.MINOR.
func (v Version) MinorString() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Supported reports whether v's minor is in SupportedMinors.
func (v Version) Supported() bool {
	for _, m := range supportedMinors {
		if m == v.MinorString() {
			return true
		}
	}
	return false
}

// Compare returns -1, 0 or +1 as v is older than, equal to or newer than w.
func (v Version) Compare(w Version) int {
	for _, d := range [3]int{v.Major - w.Major, v.Minor - w.Minor, v.Patch - w.Patch} {
		if d != 0 {
			if d < 0 {
				return -1
			}
			return 1
		}
	}
	return 0
}

// minorsBetween counts the minor releases from v up to w, both of one major.
func minorsBetween(v, w Version) int { return w.Minor - v.Minor }

func supportedList() string { return "v" + strings.Join(supportedMinors, ", v") }
