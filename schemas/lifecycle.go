package schemas

import (
	"fmt"
	"strings"
	"time"
)

// CheckLifecycle holds every cluster of fl to upstream's support of its
// Kubernetes minor at now. A cluster on a minor past its end of life is an
// error when it is new (not in base), so that no cluster starts on a minor
// that gets no more fixes, and a warning when base has it, naming the
// upgrade path, one minor at a time, to the oldest minor upstream still
// supports. base nil is a fleet whose history is unknown (`opke validate`
// without --base): every such cluster is warned.
func (fl *Fleet) CheckLifecycle(base *Fleet, now time.Time) {
	var known map[string]*Cluster
	if base != nil {
		known = base.Clusters()
	}
	for _, f := range fl.Files {
		if f.Cluster == nil || f.Findings.HasErrors() {
			continue
		}
		c := f.Cluster
		v, err := ParseVersion(c.Spec.Kubernetes.Version)
		if err != nil || !EndOfLifeAt(v, now) {
			continue
		}
		eol, _ := EndOfLife(v)
		path := Path{"spec", "kubernetes", "version"}
		maintained := MaintainedMinors(now)
		_, existing := known[c.Metadata.Name]
		switch {
		case base != nil && !existing:
			fl.Findings = append(fl.Findings, f.finding(Problem{Path: path, Message: fmt.Sprintf(
				"Kubernetes %s reached its end of life on %s: a new cluster starts on a minor upstream supports (%s)",
				v.MinorString(), eol.Format(time.DateOnly), strings.Join(maintained, ", "))}, SeverityError))
		default:
			fl.Findings = append(fl.Findings, f.finding(Problem{Path: path, Message: fmt.Sprintf(
				"Kubernetes %s reached its end of life on %s and gets no more fixes: %s",
				v.MinorString(), eol.Format(time.DateOnly), upgradePath(v, maintained))}, SeverityWarning))
		}
	}
	fl.Findings.Sort()
}

// upgradePath says how a cluster on v gets to the oldest of maintained,
// one minor at a time.
func upgradePath(v Version, maintained []string) string {
	if len(maintained) == 0 {
		return "no minor OPKE renders is supported upstream any more; upgrade OPKE"
	}
	target, _ := ParseVersion("v" + maintained[0] + ".0")
	var steps []string
	for m := v.Minor + 1; m <= target.Minor; m++ {
		steps = append(steps, fmt.Sprintf("v%d.%d", v.Major, m))
	}
	return "upgrade one minor at a time: " + strings.Join(steps, ", then ") + " (the latest patch of each)"
}
