package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version of opke",
		Example: "  opke version",
		Args:    argsAtMost(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			version, revision := "(devel)", "unknown"
			if info, ok := debug.ReadBuildInfo(); ok {
				if info.Main.Version != "" {
					version = info.Main.Version
				}
				for _, s := range info.Settings {
					if s.Key == "vcs.revision" {
						revision = s.Value
					}
				}
			}
			_, err := fmt.Fprintf(a.stdout, "opke %s (revision %s)\n", version, revision)
			return err
		},
	}
}
