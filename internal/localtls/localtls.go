// Package localtls issues the certificates that close OPKE's own etcd to
// other local users: a throwaway CA, a certificate the etcd serves (and
// its peer port presents) for 127.0.0.1, and a client certificate, all
// written into a folder only OPKE's user can read. The etcd asks every
// client and peer for a certificate of that CA, so a process without read
// access to the folder can neither read nor write the state, even on
// 127.0.0.1. Each start issues new keys: nothing long-lived to steal.
package localtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// The files in a folder Issue wrote.
const (
	CAFile         = "ca.crt"
	ServerCertFile = "server.crt"
	ServerKeyFile  = "server.key"
	ClientCertFile = "client.crt"
	ClientKeyFile  = "client.key"
)

// Files are the paths of an issued set.
type Files struct {
	Dir string
}

// Path is the path of one of the files.
func (f Files) Path(name string) string { return filepath.Join(f.Dir, name) }

// Issue writes a new CA, server and client certificate into dir (created
// 0700; the keys 0600), replacing any earlier set.
func Issue(dir string) (Files, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Files{}, fmt.Errorf("local TLS: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return Files{}, fmt.Errorf("local TLS: %w", err)
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	ca := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "opke-local-etcd-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return Files{}, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Files{}, err
	}
	leaf := func(cn string, usage []x509.ExtKeyUsage, ips []net.IP) ([]byte, []byte, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage, IPAddresses: ips, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pemOf("CERTIFICATE", der), pemOf("EC PRIVATE KEY", kder), nil
	}
	// The server certificate is the peer's client certificate too.
	srvCert, srvKey, err := leaf("opke-local-etcd", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback})
	if err != nil {
		return Files{}, err
	}
	cliCert, cliKey, err := leaf("opke", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil)
	if err != nil {
		return Files{}, err
	}
	f := Files{Dir: dir}
	for name, data := range map[string][]byte{CAFile: pemOf("CERTIFICATE", caDER), ServerCertFile: srvCert, ServerKeyFile: srvKey,
		ClientCertFile: cliCert, ClientKeyFile: cliKey} {
		tmp := f.Path("." + name + ".tmp")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return Files{}, fmt.Errorf("local TLS: %w", err)
		}
		if err := os.Rename(tmp, f.Path(name)); err != nil {
			return Files{}, fmt.Errorf("local TLS: %w", err)
		}
	}
	return f, nil
}

// ErrNone is a folder without an issued set.
var ErrNone = errors.New("no local etcd certificates")

// ClientConfig is the TLS configuration of a client of the etcd whose
// certificates are in dir: the CA to trust and the client certificate.
func ClientConfig(dir string) (*tls.Config, error) {
	f := Files{Dir: dir}
	caPEM, err := os.ReadFile(f.Path(CAFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", dir, ErrNone)
	}
	if err != nil {
		return nil, fmt.Errorf("local TLS: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("local TLS: %s holds no certificate", f.Path(CAFile))
	}
	pair, err := tls.LoadX509KeyPair(f.Path(ClientCertFile), f.Path(ClientKeyFile))
	if err != nil {
		return nil, fmt.Errorf("local TLS: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, Certificates: []tls.Certificate{pair}}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

func pemOf(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

// TLSInfo is what an embedded etcd serves with on its client and peer
// URLs: the server certificate, and a client certificate of the CA asked
// of everyone who connects.
func (f Files) TLSInfo() transport.TLSInfo {
	return transport.TLSInfo{CertFile: f.Path(ServerCertFile), KeyFile: f.Path(ServerKeyFile), TrustedCAFile: f.Path(CAFile), ClientCertAuth: true}
}
