package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"opke.dev/opke/reconciler/source"
	"opke.dev/opke/schemas"
)

// validateReport is the JSON form of `opke validate --output json`.
type validateReport struct {
	Valid bool `json:"valid"`
	// ValidClusters names the clusters whose specs have no errors.
	ValidClusters []string          `json:"validClusters"`
	Errors        int               `json:"errors"`
	Warnings      int               `json:"warnings"`
	Findings      []schemas.Finding `json:"findings"`
}

func (a *app) validateCommand() *cobra.Command {
	var base, output string
	cmd := &cobra.Command{
		Use:   "validate [DIR]",
		Short: "Validate the fleet of cluster specs under DIR",
		Long: `Validate every clusters/<name>/cluster.yaml under DIR (default: the current
folder) against the spec's schema and rules, reporting every problem at once
with its file, line and field path. With --base, also check that each change
since that git revision is one a live cluster can take.

Exit codes: 0 valid, 1 findings, 2 usage error.`,
		Example: `  opke validate .
  opke validate . --base origin/main
  opke validate fleet/ --output json`,
		Args: argsAtMost(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := outputFormat(output); err != nil {
				return err
			}
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				return usagef("%s: not a folder", dir)
			}
			fsys, closeFS, err := folderFS(dir)
			if err != nil {
				return err
			}
			defer closeFS()
			fleet, err := schemas.LoadFleet(fsys, dir)
			if errors.Is(err, schemas.ErrNotFleet) {
				return usagef("%s: %w", dir, err)
			}
			if err != nil {
				return fmt.Errorf("load fleet: %w", err)
			}
			if base != "" {
				baseFS, err := source.OpenRevision(cmd.Context(), dir, base)
				switch {
				case errors.Is(err, source.ErrNoRepository), errors.Is(err, source.ErrUnknownRevision):
					return usagef("--base: %w", err)
				case err != nil:
					return fmt.Errorf("--base: %w", err)
				}
				// Base files are named as the files under DIR they were.
				baseFleet, err := loadBaseFleet(baseFS, dir)
				if err != nil {
					return fmt.Errorf("--base %s: %w", base, err)
				}
				fleet.CheckTransitions(baseFleet, nil)
				fleet.CheckLifecycle(baseFleet, lifecycleNow())
			} else {
				fleet.CheckLifecycle(nil, lifecycleNow())
			}
			return a.printFindings(fleet, output)
		},
	}
	cmd.Flags().StringVar(&base, "base", "", "git revision to check transitions from (a branch, tag or commit)")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

// lifecycleNow is the day validate judges each minor's upstream support
// at (schemas.CheckLifecycle): today, or a test's fixed day.
var lifecycleNow = time.Now

// loadBaseFleet reads the fleet at the base revision; a revision from before
// the fleet existed is an empty fleet.
func loadBaseFleet(fsys fs.FS, prefix string) (*schemas.Fleet, error) {
	fl, err := schemas.LoadFleet(fsys, prefix)
	if errors.Is(err, schemas.ErrNotFleet) {
		return &schemas.Fleet{}, nil
	}
	return fl, err
}

func (a *app) printFindings(fleet *schemas.Fleet, output string) error {
	r := validateReport{
		ValidClusters: append([]string{}, slices.Sorted(maps.Keys(fleet.Clusters()))...),
		Findings:      append([]schemas.Finding{}, fleet.Findings...),
	}
	for _, f := range fleet.Findings {
		if f.Severity == schemas.SeverityError {
			r.Errors++
		} else {
			r.Warnings++
		}
	}
	r.Valid = r.Errors == 0
	if output == "json" {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	} else {
		for _, f := range r.Findings {
			fmt.Fprintln(a.stdout, f)
		}
		fmt.Fprintf(a.stdout, "%d %s, %d %s, %d %s\n",
			len(fleet.Files), plural(len(fleet.Files), "cluster"), r.Errors, plural(r.Errors, "error"), r.Warnings, plural(r.Warnings, "warning"))
	}
	if !r.Valid {
		return exitCodeError{exitFindings}
	}
	return nil
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
