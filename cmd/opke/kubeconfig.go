package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"opke.dev/opke/internal/atomicfile"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/state"
)

func (a *app) kubeconfigCommand() *cobra.Command {
	var st stateFlags
	var cluster, out, proxy, simState string
	cmd := &cobra.Command{
		Use:   "kubeconfig --cluster NAME",
		Short: "Print a cluster's admin kubeconfig",
		Long: `Print the admin kubeconfig of a cluster OPKE applied: the API's floating IP,
the cluster's CA and the admin client certificate and key. It is kept
sealed in the state store, so the encryption key is needed. It grants
everything on the cluster: --out writes it to a file readable by you only.

Where the floating IP is not routed from here, --proxy-url names the proxy
kubectl dials it through (its proxy-url). On a daemon's data dir whose
daemon runs the simulator (make run), or with --sim-state, that is the
simulator's SOCKS5 edge unless --proxy-url says otherwise.`,
		Example: `  opke kubeconfig --cluster demo --out demo.kubeconfig && kubectl --kubeconfig demo.kubeconfig get nodes
  opke kubeconfig --cluster prod --out ~/.kube/prod --encryption-key-file key
  opke kubeconfig --cluster prod --proxy-url socks5://127.0.0.1:1080`,
		Args: argsAtMost(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cluster == "" {
				return usagef("--cluster is required")
			}
			store, err := st.open(cmd.Context(), a)
			if err != nil {
				return err
			}
			defer store.Close()
			kc, err := store.GetSecret(cmd.Context(), state.KeysOf(store).Kubeconfig(cluster))
			if errors.Is(err, state.ErrNotFound) {
				return fmt.Errorf("cluster %s has no kubeconfig in the state store: it is not applied yet (opke apply)", cluster)
			}
			if err != nil {
				return err
			}
			if proxy == "" {
				// The simulator's edge (--sim-state, or the daemon's on the
				// data dir), or the daemon's own proxy to floating IPs.
				clouds, err := (&cloudFlags{simState: simState}).resolve(st.dataDir)
				if err != nil {
					return err
				}
				if clouds.dialer.Proxy != "" {
					proxy = "socks5://" + clouds.dialer.Proxy
				}
			}
			if proxy != "" {
				if kc, err = pki.WithProxy(kc, proxy); err != nil {
					return usagef("--proxy-url: %v", err)
				}
			}
			if out != "" {
				return atomicfile.Write(out, kc, 0o600)
			}
			_, err = a.stdout.Write(kc)
			return err
		},
	}
	st.register(cmd)
	cmd.Flags().StringVar(&cluster, "cluster", "", "the cluster")
	cmd.Flags().StringVar(&out, "out", "", "write the kubeconfig to this file (0600) instead of stdout")
	cmd.Flags().StringVar(&proxy, "proxy-url", "", "the proxy kubectl reaches the API through (socks5://, http://, https://)")
	cmd.Flags().StringVar(&simState, "sim-state", "", "a running simulator's state dir: the API through its SOCKS5 edge")
	return cmd
}
