package reconciler_test

import (
	"encoding/xml"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSummarizeJUnit reads ginkgo v2's JUnit report as e2e.test writes
// it (junit_01.xml): specs passed, failed with their first line, skipped;
// the suite's own nodes are not specs.
func TestSummarizeJUnit(t *testing.T) {
	b, err := os.ReadFile("testdata/conformance/junit_01.xml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := summarizeJUnit(b)
	if err != nil {
		t.Fatal(err)
	}
	want := conformanceSummary{passed: 1, skipped: 1, failed: []string{
		"[sig-node] Pods should be submitted and removed [NodeConformance] [Conformance]: failed to write 125000 to cpu.cfs_quota_us: invalid argument",
	}}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(conformanceSummary{})); d != "" {
		t.Errorf("summary (-want +got):\n%s", d)
	}
	if _, err := summarizeJUnit([]byte("<testsuites><testsuite>")); err == nil {
		t.Error("a truncated report was read")
	}
}

// conformanceSummary is what upstream's JUnit report says.
type conformanceSummary struct {
	passed, skipped int
	failed          []string // each spec with its failure's first line
}

// summarizeJUnit reads ginkgo's JUnit report (junit_01.xml).
func summarizeJUnit(b []byte) (conformanceSummary, error) {
	var doc struct {
		Suites []struct {
			Cases []struct {
				Name    string    `xml:"name,attr"`
				Status  string    `xml:"status,attr"`
				Skipped *struct{} `xml:"skipped"`
				Failure *struct {
					Message string `xml:"message,attr"`
					Text    string `xml:",chardata"`
				} `xml:"failure"`
				Error *struct {
					Message string `xml:"message,attr"`
				} `xml:"error"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		return conformanceSummary{}, fmt.Errorf("the JUnit report: %w", err)
	}
	var s conformanceSummary
	for _, suite := range doc.Suites {
		for _, c := range suite.Cases {
			if suiteNode(c.Name) {
				continue // ginkgo's suite setup and reports, not specs
			}
			switch {
			case c.Failure != nil || c.Error != nil:
				msg := ""
				if c.Failure != nil {
					msg = c.Failure.Message
					if msg == "" {
						msg = c.Failure.Text
					}
				} else {
					msg = c.Error.Message
				}
				first, _, _ := strings.Cut(strings.TrimSpace(msg), "\n")
				s.failed = append(s.failed, c.Name+": "+first)
			case c.Skipped != nil || c.Status == "skipped":
				s.skipped++
			default:
				s.passed++
			}
		}
	}
	return s, nil
}

// suiteNode reports whether a JUnit case is one of ginkgo's suite-level
// nodes ([SynchronizedBeforeSuite], [ReportAfterSuite] ...).
func suiteNode(name string) bool {
	if !strings.HasPrefix(name, "[") {
		return false
	}
	word, _, _ := strings.Cut(name[1:], "]")
	return strings.HasSuffix(word, "Suite")
}
