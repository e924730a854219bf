package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	"golang.org/x/term"

	"opke.dev/opke/reconciler"
	"opke.dev/opke/state"
)

func (a *app) sshCommand() *cobra.Command {
	var st stateFlags
	var cf cloudFlags
	var cluster string
	cmd := &cobra.Command{
		Use:   "ssh --cluster NAME HOST [-- COMMAND...]",
		Short: "Open a shell on a cluster's host, or run a command there",
		Long: `Reach a host of a cluster OPKE applied as OPKE does: through the cluster's
gateway (its floating IP, through the simulator's edge or --socks-proxy
where floating IPs are not routed from here), as core with the cluster's
SSH key (kept sealed in the state store), each host key checked against
the one OPKE pinned from the server's console. HOST is a server's name
(demo-controller-0) or the gateway's (demo-gateway-0).

With a COMMAND (after --, as ssh joins its words with spaces), runs it and
exits with its exit status; without, opens a shell (a terminal when
standard input is one). On a daemon's data dir, the clouds are the
daemon's.`,
		Example: `  opke ssh --cluster demo demo-controller-0
  opke ssh --cluster demo demo-controller-0 -- sudo crictl ps
  opke ssh --cluster prod prod-default-3 --cloud-config clouds.yaml --encryption-key-file key -- journalctl -u kubelet -n 50`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("name the host: opke ssh --cluster NAME HOST")
			}
			if cmd.ArgsLenAtDash() > 1 || (cmd.ArgsLenAtDash() == -1 && len(args) > 1) {
				return usagef("one host, then -- and the command: opke ssh --cluster NAME HOST -- COMMAND...")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cluster == "" {
				return usagef("--cluster is required")
			}
			ctx := cmd.Context()
			planner, hosts, done, err := a.reachClusters(ctx, &st, &cf)
			if err != nil {
				return err
			}
			defer done()
			t, _, err := reconciler.ClusterHosts(ctx, planner, cluster)
			if errors.Is(err, state.ErrNotFound) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			client, err := hosts.Client(ctx, t, args[0])
			if errors.Is(err, state.ErrNotFound) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			sess, err := client.NewSession()
			if err != nil {
				return fmt.Errorf("ssh %s: %w", args[0], err)
			}
			defer sess.Close()
			sess.Stdin, sess.Stdout, sess.Stderr = a.stdin, a.stdout, a.stderr
			if len(args) > 1 {
				err = sess.Run(strings.Join(args[1:], " "))
			} else {
				err = a.shell(sess)
			}
			var exit *ssh.ExitError
			if errors.As(err, &exit) {
				return exitCodeError{exit.ExitStatus()}
			}
			if err != nil {
				return fmt.Errorf("ssh %s: %w", args[0], err)
			}
			return nil
		},
	}
	st.register(cmd)
	cf.register(cmd)
	cmd.Flags().StringVar(&cluster, "cluster", "", "the cluster")
	return cmd
}

// shell opens a login shell in sess, on a terminal when standard input
// is one (raw mode while it runs, the window's size followed).
func (a *app) shell(sess *ssh.Session) error {
	in, ok := a.stdin.(*os.File)
	if !ok || !term.IsTerminal(int(in.Fd())) {
		if err := sess.Shell(); err != nil {
			return err
		}
		return sess.Wait()
	}
	fd := int(in.Fd())
	w, h, err := term.GetSize(fd)
	if err != nil {
		w, h = 80, 24
	}
	if err := sess.RequestPty(cmp.Or(os.Getenv("TERM"), "xterm-256color"), h, w, ssh.TerminalModes{ssh.ECHO: 1}); err != nil {
		return err
	}
	old, err := term.MakeRaw(fd)
	if err != nil {
		return err
	}
	defer func() { _ = term.Restore(fd, old) }()
	resized := make(chan os.Signal, 1)
	signal.Notify(resized, syscall.SIGWINCH)
	defer func() { signal.Stop(resized); close(resized) }()
	go func() {
		for range resized {
			if w, h, err := term.GetSize(fd); err == nil {
				_ = sess.WindowChange(h, w)
			}
		}
	}()
	if err := sess.Shell(); err != nil {
		return err
	}
	return sess.Wait()
}

// reachClusters opens what a command that reaches applied clusters'
// hosts needs: the state store and the clouds the flags name, sessions
// to the hosts through their gateways, and a planner over them; done
// closes them.
func (a *app) reachClusters(ctx context.Context, st *stateFlags, cf *cloudFlags) (*reconciler.Planner, *reconciler.HostSessions, func(), error) {
	clouds, err := cf.resolve(st.dataDir)
	if err != nil {
		return nil, nil, nil, err
	}
	store, err := st.open(ctx, a)
	if err != nil {
		return nil, nil, nil, err
	}
	hosts := &reconciler.HostSessions{Dialer: clouds.dialer}
	done := func() { hosts.Close(); store.Close() }
	return &reconciler.Planner{Store: store, Clouds: clouds.pool, Hosts: hosts, Logger: a.logger}, hosts, done, nil
}
