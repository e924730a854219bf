package schemas

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// supportedMinors are the Kubernetes minors OPKE renders assets for, oldest
// first: upstream's supported minors, and those past their end of life
// that a cluster may still run and upgrade from (CheckLifecycle refuses a
// new cluster on one, and warns an existing one with its upgrade path).
var supportedMinors = []string{"1.30", "1.31", "1.32", "1.33", "1.34", "1.35", "1.36", "1.37"}

// endOfLife is the last day of upstream's support of each minor of
// supportedMinors, as kubernetes.io/releases gives them (read 2026-12-02).
var endOfLife = map[string]string{
	"1.30": "2025-07-15", "1.31": "2025-10-28", "1.32": "2026-02-28", "1.33": "2026-06-28",
	"1.34": "2026-10-27", "1.35": "2027-02-28", "1.36": "2027-06-28", "1.37": "2027-10-28",
}

// EndOfLife returns the last day of upstream's support of v's minor, false
// for a minor OPKE does not render.
func EndOfLife(v Version) (time.Time, bool) {
	d, ok := endOfLife[v.MinorString()]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.DateOnly, d)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// EndOfLifeAt reports whether upstream's support of v's minor has ended at
// now (the day after its last day).
func EndOfLifeAt(v Version, now time.Time) bool {
	eol, ok := EndOfLife(v)
	return ok && !now.Before(eol.AddDate(0, 0, 1))
}

// MaintainedMinors lists the minors of supportedMinors upstream supports
// at now, oldest first.
func MaintainedMinors(now time.Time) []string {
	var out []string
	for _, m := range supportedMinors {
		v, _ := ParseVersion("v" + m + ".0")
		if !EndOfLifeAt(v, now) {
			out = append(out, m)
		}
	}
	return out
}

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
