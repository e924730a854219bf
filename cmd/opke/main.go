// Command opke is the OPKE binary: the GitOps reconciler daemon for
// Kubernetes clusters on OpenStack and the commands around it.
//
// Exit codes: 0 success, 1 a failure or findings, 2 a usage error; commands
// document their own codes (opke plan --detailed-exitcode) in their help.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
