package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"opke.dev/opke/cloud"
)

// Exit codes shared by every command.
const (
	exitOK       = 0
	exitFailure  = 1
	exitUsage    = 2
	exitFindings = 1
)

// usageError is a mistake in how a command was called: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitCodeError ends the command with a code and no further message: the
// command has printed what it had to say.
type exitCodeError struct{ code int }

func (e exitCodeError) Error() string { return fmt.Sprintf("exit code %d", e.code) }

// app holds what every command shares: its output streams and logger.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	logger         *slog.Logger
	logLevel       string
	logFormat      string
}

// run executes the command line args and returns the process exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.rootCommand()
	root.SetArgs(args)
	started := false
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		started = true
		return a.setupLogger()
	}
	cmd, err := root.ExecuteContextC(ctx)
	var code exitCodeError
	var usage usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &code):
		return code.code
	case errors.As(err, &usage) || !started:
		// Cobra's own errors (unknown command, bad flag, wrong arguments)
		// come before any command starts: they are usage errors too.
		fmt.Fprintf(stderr, "opke: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
		return exitUsage
	default:
		fmt.Fprintf(stderr, "opke: %v\n", err)
		if errors.Is(err, cloud.ErrNoCloudsFile) {
			fmt.Fprintln(stderr, "Name the clouds: --cloud-config FILE (or OS_CLIENT_CONFIG_FILE), or --sim-state DIR for the simulator; on the data dir of a running daemon (--data-dir), its clouds are used.")
		}
		return exitFailure
	}
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "opke",
		Short: "Run Kubernetes clusters on OpenStack from git",
		Long: `OPKE reconciles a git repository of cluster specs (clusters/<name>/cluster.yaml)
with OpenStack: it validates every commit, plans the minimal change and applies it.`,
		Example: `  opke validate .
  opke validate . --base origin/main --output json`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&a.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	pf.StringVar(&a.logFormat, "log-format", "text", "log format: text or json")
	root.AddCommand(a.validateCommand(), a.renderCommand(), a.planCommand(), a.applyCommand(), a.kubeconfigCommand(), a.sshCommand(), a.checkCommand(), a.backupCommand(), a.restoreCommand(), a.serveCommand(), a.simCommand(), a.versionCommand())
	return root
}

func (a *app) setupLogger() error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(a.logLevel)); err != nil {
		return usagef("--log-level %q: want debug, info, warn or error", a.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(a.logFormat) {
	case "text":
		a.logger = slog.New(slog.NewTextHandler(a.stderr, opts))
	case "json":
		a.logger = slog.New(slog.NewJSONHandler(a.stderr, opts))
	default:
		return usagef("--log-format %q: want text or json", a.logFormat)
	}
	return nil
}

// argsAtMost is cobra.MaximumNArgs as a usage error.
func argsAtMost(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.MaximumNArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// outputFormat checks an --output flag's value.
func outputFormat(v string) error {
	if v != "text" && v != "json" {
		return usagef("--output %q: want text or json", v)
	}
	return nil
}

// repoFlag is --repo, the fleet repository, of the commands that read one.
func repoFlag(fl *pflag.FlagSet, repo *string) {
	fl.StringVar(repo, "repo", ".", "the fleet repository (a folder with clusters/<name>/cluster.yaml)")
}
