package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"opke.dev/opke/state"
)

// stateFlags are the state-store flags every command that reads or writes
// OPKE's state shares.
type stateFlags struct {
	dataDir       string
	endpoints     []string
	etcdCA        string
	etcdCert      string
	etcdKey       string
	prefix        string
	encryptionKey string
}

// defaultKeyFile is the encryption key's file in the data dir, generated
// at first use when --encryption-key-file is not given.
const defaultKeyFile = "encryption.key"

func (f *stateFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", ".opke", "OPKE's data dir: the embedded etcd and, by default, the encryption key")
	fl.StringSliceVar(&f.endpoints, "etcd", nil, "external etcd client URLs (comma-separated) instead of the embedded etcd")
	fl.StringVar(&f.etcdCA, "etcd-ca", "", "CA bundle that signs the external etcd's serving certs")
	fl.StringVar(&f.etcdCert, "etcd-cert", "", "client certificate for the external etcd")
	fl.StringVar(&f.etcdKey, "etcd-key", "", "client key for the external etcd")
	fl.StringVar(&f.prefix, "etcd-prefix", state.DefaultPrefix, "prefix of every key OPKE writes")
	fl.StringVar(&f.encryptionKey, "encryption-key-file", "",
		"key that seals private keys in the store: 32 bytes or 64 hex digits (default DATA_DIR/"+defaultKeyFile+", created if missing)")
}

// open opens the store the flags describe.
func (f *stateFlags) open(ctx context.Context, a *app) (*state.Store, error) {
	// Every flag is checked before anything is created on disk.
	var tlsCfg *tls.Config
	var err error
	if f.etcdCA != "" || f.etcdCert != "" || f.etcdKey != "" {
		if tlsCfg, err = f.tlsConfig(); err != nil {
			return nil, usageError{err}
		}
	}
	var key []byte
	if f.encryptionKey != "" {
		if key, err = state.ReadKeyFile(f.encryptionKey); err != nil {
			return nil, usageError{err}
		}
	} else {
		if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		if key, err = state.EnsureKeyFile(filepath.Join(f.dataDir, defaultKeyFile)); err != nil {
			return nil, err
		}
	}
	opts := state.Options{DataDir: f.dataDir, Endpoints: f.endpoints, Prefix: f.prefix, EncryptionKey: key, Logger: a.logger, TLS: tlsCfg}
	s, err := state.Open(ctx, opts)
	if errors.Is(err, state.ErrLocked) {
		// A daemon holds the data dir: attach to its etcd.
		ep, aerr := attach(f.dataDir)
		if aerr != nil {
			return nil, fmt.Errorf("%w (is another opke running on this data dir?)", err)
		}
		a.logger.Debug("attached to the daemon's etcd", "pid", ep.PID, "etcd", ep.Etcd)
		opts.Endpoints = ep.Etcd
		if opts.TLS == nil {
			// Its certificates are in the data dir: readable by its user only.
			if opts.TLS, aerr = state.LocalTLS(f.dataDir); aerr != nil {
				return nil, fmt.Errorf("attach to the daemon's etcd: %w", aerr)
			}
		}
		s, err = state.Open(ctx, opts)
	}
	return s, err
}

func (f *stateFlags) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.etcdCA != "" {
		b, err := os.ReadFile(f.etcdCA)
		if err != nil {
			return nil, fmt.Errorf("--etcd-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--etcd-ca %s: no PEM certificate", f.etcdCA)
		}
	}
	if (f.etcdCert == "") != (f.etcdKey == "") {
		return nil, errors.New("--etcd-cert and --etcd-key go together")
	}
	if f.etcdCert != "" {
		pair, err := tls.LoadX509KeyPair(f.etcdCert, f.etcdKey)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert/--etcd-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
