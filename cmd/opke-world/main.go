// Command opke-world builds the test world's Kubernetes from upstream
// source (package world): `make world` runs `opke-world build`.
//
//	opke-world build [--set all|e2e] [--cache DIR]   build what is missing, print what is there
//	opke-world list  [--set all|e2e]                 the artifacts and images of a set
//
// Exit codes: 0 success, 1 a failed build, 2 a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"opke.dev/opke/world"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "build" && args[0] != "list") {
		fmt.Fprintln(stderr, "usage: opke-world build|list [--set all|e2e] [--cache DIR]")
		return 2
	}
	fs := flag.NewFlagSet("opke-world "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	set := fs.String("set", string(world.All), "which artifacts: all (every Kubernetes version of the test matrix) or e2e (what the real-host suites use)")
	cache := fs.String("cache", world.DefaultCacheDir(), "the cache folder, outside the repository")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "opke-world %s: unexpected arguments %q\n", args[0], fs.Args())
		return 2
	}
	arts, err := world.Targets(world.Set(*set))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if args[0] == "list" {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ARTIFACT\tMODULE\tBINARIES\tIMAGES")
		for _, a := range arts {
			var bins, imgs []string
			for _, b := range a.Binaries {
				bins = append(bins, b.Name)
			}
			for _, im := range a.Images {
				imgs = append(imgs, im.Ref)
			}
			fmt.Fprintf(tw, "%s\t%s@%s\t%v\t%v\n", a.Key, a.Module, a.Version, bins, imgs)
		}
		_ = tw.Flush()
		return 0
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{}))
	started := time.Now()
	built, err := world.New(*cache, log).Ensure(ctx, arts)
	if built != nil {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ARTIFACT\tSTATE\tTOOK")
		for _, r := range built.Artifacts {
			state := "built"
			if r.Cached {
				state = "cached"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Key, state, r.Took.Round(time.Second))
		}
		_ = tw.Flush()
		fmt.Fprintf(stdout, "%d artifacts, %d images in %s, %s\n", len(built.Artifacts), len(built.Images()), *cache, time.Since(started).Round(time.Second))
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "opke-world: interrupted; what was built is kept")
		}
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
