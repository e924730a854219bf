package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"opke.dev/opke/internal/atomicfile"
	"opke.dev/opke/state"
)

func (a *app) kubeconfigCommand() *cobra.Command {
	var st stateFlags
	var cluster, out string
	cmd := &cobra.Command{
		Use:   "kubeconfig --cluster NAME",
		Short: "Print a cluster's admin kubeconfig",
		Long: `Print the admin kubeconfig of a cluster OPKE applied: the API's floating IP,
the cluster's CA and the admin client certificate and key. It is kept
sealed in the state store, so the encryption key is needed. It grants
everything on the cluster: --out writes it to a file readable by you only.`,
		Example: `  opke kubeconfig --cluster demo > demo.kubeconfig
  opke kubeconfig --cluster prod --out ~/.kube/prod --encryption-key-file key`,
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
			kc, err := store.GetSecret(cmd.Context(), store.Key(cluster, "kubeconfig"))
			if errors.Is(err, state.ErrNotFound) {
				return fmt.Errorf("cluster %s has no kubeconfig in the state store: it is not applied yet (opke apply)", cluster)
			}
			if err != nil {
				return err
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
	return cmd
}
