package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"opke.dev/opke/reconciler"
	"opke.dev/opke/state"
)

func (a *app) checkCommand() *cobra.Command {
	var st stateFlags
	var cf cloudFlags
	var cluster, output string
	var timeout time.Duration
	var skip []string
	cmd := &cobra.Command{
		Use:   "check --cluster NAME",
		Short: "Smoke-test an applied cluster: DNS, pod-to-pod, a Service, a load balancer, a volume",
		Long: `Run a bounded smoke test against a cluster OPKE applied, through the paths
OPKE uses: its API through the cluster's gateway, a load balancer at its
address as a client on the Internet reaches it. In a namespace of its own
(opke-check-<random>, deleted at the end with what it made):

  pods           two pods of upstream's agnhost image on two schedulable nodes, ready
  pod-network    the first reaches the second at its pod IP, across nodes
  service        the same through a Service's cluster IP
  dns            the same through the Service's name in the cluster's DNS
  load-balancer  a Service of type LoadBalancer gets an Octavia address that
                 answers (the openstack-cloud-controller-manager addon)
  volume         a claim of the default class is bound, attached and
                 written (the cinder-csi addon)

A check that needs one that failed is skipped. Each line gives the
check's time and what it saw, or why it failed. The pods pull
` + reconciler.CheckImage + `
(an air-gapped cloud mirrors it with the rest).

Exit codes: 0 every check passed (or was skipped for an addon that is
off) and the namespace is gone; 1 a check failed or the namespace was not
deleted; 2 a usage error.`,
		Example: `  opke check --cluster demo
  opke check --cluster demo --skip load-balancer,volume
  opke check --cluster prod --cloud-config clouds.yaml --encryption-key-file key --output json`,
		Args: argsAtMost(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cluster == "" {
				return usagef("--cluster is required")
			}
			if err := outputFormat(output); err != nil {
				return err
			}
			for _, s := range skip {
				if !slices.Contains(reconciler.Checks, s) {
					return usagef("--skip %q: want one of %s", s, strings.Join(reconciler.Checks, ", "))
				}
			}
			if timeout <= 0 {
				return usagef("--timeout %s: want a positive duration", timeout)
			}
			ctx := cmd.Context()
			planner, hosts, done, err := a.reachClusters(ctx, &st, &cf)
			if err != nil {
				return err
			}
			defer done()
			report, err := reconciler.CheckCluster(ctx, planner, hosts, cluster, reconciler.CheckOptions{Timeout: timeout, Skip: skip, Logger: a.logger})
			if errors.Is(err, state.ErrNotFound) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			if output == "json" {
				b, err := report.JSON()
				if err != nil {
					return err
				}
				_, err = a.stdout.Write(b)
				if err != nil {
					return err
				}
			} else if _, err := fmt.Fprint(a.stdout, report.String()); err != nil {
				return err
			}
			if !report.Passed() {
				return exitCodeError{exitFindings}
			}
			return nil
		},
	}
	st.register(cmd)
	cf.register(cmd)
	cmd.Flags().StringVar(&cluster, "cluster", "", "the cluster")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.Flags().StringSliceVar(&skip, "skip", nil, "checks not to run (those that need one are skipped with it): "+strings.Join(reconciler.Checks, ", "))
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Minute, "how long each check may wait for what it made (pods ready, a load balancer's address, a volume)")
	return cmd
}
