package localtls

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestIssue: the folder and keys are the user's only; the server
// certificate verifies for 127.0.0.1 under the CA, for servers and peers
// alike; the client certificate is a client's; a folder without a set is
// ErrNone; a second issue replaces the CA.
func TestIssue(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "tls")
	if _, err := ClientConfig(dir); !errors.Is(err, ErrNone) {
		t.Fatalf("no set yet: %v, want ErrNone", err)
	}
	f, err := Issue(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("folder: %v %v, want 0700", st.Mode(), err)
	}
	for _, name := range []string{ServerKeyFile, ClientKeyFile} {
		if st, err := os.Stat(f.Path(name)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want 0600", name, err)
		}
	}
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(f.Path(CAFile))
	pool.AppendCertsFromPEM(caPEM)
	cert := func(name string) *x509.Certificate {
		b, _ := os.ReadFile(f.Path(name))
		blk, _ := pem.Decode(b)
		if blk == nil {
			t.Fatalf("%s: no PEM", name)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	srv := cert(ServerCertFile)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := srv.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("server certificate for usage %v: %v", usage, err)
		}
	}
	if _, err := cert(ClientCertFile).Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	cfg, err := ClientConfig(dir)
	if err != nil || len(cfg.Certificates) != 1 || cfg.RootCAs == nil {
		t.Fatalf("client config: %+v %v", cfg, err)
	}
	if _, err := Issue(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Verify(x509.VerifyOptions{Roots: func() *x509.CertPool {
		p := x509.NewCertPool()
		b, _ := os.ReadFile(f.Path(CAFile))
		p.AppendCertsFromPEM(b)
		return p
	}(), DNSName: "127.0.0.1"}); err == nil {
		t.Error("the old server certificate verifies under the new CA: the set was not issued anew")
	}
}
