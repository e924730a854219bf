package pki

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"opke.dev/opke/state"
)

// Lifetimes of what Issue creates.
const (
	caValidity    = 10 * 365 * 24 * time.Hour
	leafValidity  = 365 * 24 * time.Hour
	DefaultRenew  = 30 * 24 * time.Hour
	ClusterDomain = "cluster.local"
)

// Names of the CAs and of the cluster-wide certs.
const (
	CA                  = "ca"
	EtcdCA              = "etcd-ca"
	FrontProxyCA        = "front-proxy-ca"
	APIServerEtcdClient = "apiserver-etcd-client"
	APIServerKubelet    = "apiserver-kubelet-client"
	FrontProxyClient    = "front-proxy-client"
	ControllerManager   = "controller-manager"
	Scheduler           = "scheduler"
	Admin               = "admin"
	EtcdOPKEClient      = "etcd-opke-client"
	EtcdBackupClient    = "etcd-backup-client"
	ServiceAccount      = "sa"
	// SecretsEncryption is the key the API servers encrypt Secrets in
	// etcd with (secretbox): Key is its 32 bytes, base64; Cert its name
	// in the encryption configuration.
	SecretsEncryption = "secrets-encryption"
)

// Host is a server that gets its own certs.
type Host struct {
	Name string
	IP   netip.Addr
}

// Request says what a cluster's PKI must cover.
type Request struct {
	Cluster     string
	Controllers []Host
	Workers     []Host
	// APIVIP is the API's virtual IP; APIFloatingIP its floating IP, zero
	// while it is not known (before the cluster exists).
	APIVIP        netip.Addr
	APIFloatingIP netip.Addr
	ServiceCIDR   netip.Prefix
	// Rotation is where the cluster's CAs and service account key stand
	// in a rotation (spec.pki); the zero value is generation 1, complete.
	Rotation Rotation
	// Now is the time of issue; RenewWithin re-issues certs that expire
	// within it (default DefaultRenew).
	Now         time.Time
	RenewWithin time.Duration
}

// Material is a cert (or a public key, for the service account) and its
// private key, both PEM.
type Material struct {
	Cert []byte
	Key  []byte
}

// Bundle is a cluster's PKI by name.
type Bundle struct {
	m map[string]Material
	// trust holds, for each CA and the service account key, the PEM of
	// every generation trusted (the signing one first): what the hosts'
	// ca.crt and sa.pub, the kubeconfigs and OPKE's clients trust.
	trust map[string][]byte
}

// Trust returns what trusting the CA name means: the PEM certificates of
// every generation of it trusted now, the one that signs first (for the
// service account key, its public keys). Outside a rotation, the CA's
// one certificate.
func (b *Bundle) Trust(name string) []byte {
	if t, ok := b.trust[name]; ok {
		return t
	}
	return b.m[name].Cert
}

// Get returns the named material and whether it exists.
func (b *Bundle) Get(name string) (Material, bool) {
	m, ok := b.m[name]
	return m, ok
}

// Names lists the material in the bundle, sorted.
func (b *Bundle) Names() []string {
	names := make([]string, 0, len(b.m))
	for n := range b.m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// spec is one certificate to hold.
type spec struct {
	name     string
	ca       string // "" for a CA
	cn       string
	orgs     []string
	dns      []string
	ips      []netip.Addr
	server   bool
	client   bool
	validity time.Duration
}

// ServerName helpers: the per-host material names.
func EtcdServer(host string) string { return "etcd-server-" + host }
func EtcdPeer(host string) string   { return "etcd-peer-" + host }
func APIServer(host string) string  { return "apiserver-" + host }
func Kubelet(host string) string    { return "kubelet-" + host }

func (r Request) specs() []spec {
	loop := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
	svcIP := r.ServiceCIDR.Masked().Addr().Next()
	signing, trusted := r.Rotation.generations()
	var out []spec
	for _, ca := range caSubjects {
		for _, g := range trusted {
			out = append(out, spec{name: generationName(ca.name, g), cn: generationName(ca.cn, g), validity: caValidity})
		}
	}
	// Every leaf is signed by the signing generation: a leaf of another
	// one no longer chains to its CA, and is issued again.
	clusterCA, etcdCA, frontProxyCA := generationName(CA, signing), generationName(EtcdCA, signing), generationName(FrontProxyCA, signing)
	out = append(out, []spec{
		{name: APIServerEtcdClient, ca: etcdCA, cn: "kube-apiserver-etcd-client", client: true},
		{name: APIServerKubelet, ca: clusterCA, cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}, client: true},
		{name: FrontProxyClient, ca: frontProxyCA, cn: "front-proxy-client", client: true},
		{name: ControllerManager, ca: clusterCA, cn: "system:kube-controller-manager", client: true},
		{name: Scheduler, ca: clusterCA, cn: "system:kube-scheduler", client: true},
		{name: Admin, ca: clusterCA, cn: "kubernetes-admin", orgs: []string{"system:masters"}, client: true},
		{name: EtcdOPKEClient, ca: etcdCA, cn: "opke", client: true},
		{name: EtcdBackupClient, ca: etcdCA, cn: "opke-etcd-backup", client: true},
	}...)
	for _, h := range r.Controllers {
		etcdIPs := append([]netip.Addr{h.IP}, loop...)
		out = append(out,
			spec{name: EtcdServer(h.Name), ca: etcdCA, cn: h.Name, dns: []string{h.Name, "localhost"}, ips: etcdIPs, server: true, client: true},
			spec{name: EtcdPeer(h.Name), ca: etcdCA, cn: h.Name, dns: []string{h.Name, "localhost"}, ips: etcdIPs, server: true, client: true})
		apiIPs := []netip.Addr{svcIP, h.IP, r.APIVIP}
		if r.APIFloatingIP.IsValid() {
			apiIPs = append(apiIPs, r.APIFloatingIP)
		}
		apiIPs = append(apiIPs, loop[0])
		out = append(out, spec{name: APIServer(h.Name), ca: clusterCA, cn: "kube-apiserver", server: true,
			dns: []string{h.Name, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + ClusterDomain, "localhost"},
			ips: apiIPs})
	}
	for _, h := range slices.Concat(r.Controllers, r.Workers) {
		out = append(out, spec{name: Kubelet(h.Name), ca: clusterCA, cn: "system:node:" + h.Name, orgs: []string{"system:nodes"}, client: true})
	}
	return out
}

// Issue returns the cluster's PKI, reusing what the store holds and
// issuing (and storing) only what is missing or due. issued names what was
// new; a change to it means hosts need new files.
func Issue(ctx context.Context, kv state.KV, r Request) (*Bundle, []string, error) {
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	if r.RenewWithin == 0 {
		r.RenewWithin = DefaultRenew
	}
	b := &Bundle{m: map[string]Material{}, trust: map[string][]byte{}}
	parsed := map[string]*x509.Certificate{}
	signers := map[string]crypto.Signer{} // parsed on demand: only a CA that signs needs its key
	// One range read for everything the cluster holds, one batch of writes
	// for what is new: a render costs two round trips, not two per cert.
	held, err := kv.List(ctx, state.KeysOf(kv).PKI(r.Cluster))
	if err != nil {
		return nil, nil, fmt.Errorf("load PKI of %s: %w", r.Cluster, err)
	}
	var issued []string
	var writes []state.Entry
	for _, sp := range r.specs() {
		m, cert, err := load(kv, held, r.Cluster, sp.name)
		if err != nil {
			return nil, nil, err
		}
		var key crypto.Signer
		if cert == nil || !r.usable(sp, cert, parsed[sp.ca]) {
			var caKey crypto.Signer
			if sp.ca != "" {
				if caKey = signers[sp.ca]; caKey == nil {
					if caKey, err = parseKey(b.m[sp.ca].Key); err != nil {
						return nil, nil, fmt.Errorf("load %s key: %w", sp.ca, err)
					}
					signers[sp.ca] = caKey
				}
			}
			m, cert, key, err = issue(sp, parsed[sp.ca], caKey, r.Now)
			if err != nil {
				return nil, nil, fmt.Errorf("issue %s of %s: %w", sp.name, r.Cluster, err)
			}
			writes = append(writes, entries(kv, r.Cluster, sp.name, ".crt", m)...)
			issued = append(issued, sp.name)
		}
		b.m[sp.name], parsed[sp.name] = m, cert
		if key != nil {
			signers[sp.name] = key
		}
	}
	// The keys that are no certificate: each a sealed key beside a public
	// part (the service account key's public half, the Secrets' key's
	// name), loaded if held, else generated once. The service account
	// key has generations as the CAs do.
	signing, trusted := r.Rotation.generations()
	type key struct {
		name, ext string
		generate  func() (Material, error)
	}
	keys := []key{{SecretsEncryption, ".name", newSecretsKey}}
	for _, g := range trusted {
		keys = append(keys, key{generationName(ServiceAccount, g), ".pub", newServiceAccountKey})
	}
	for _, k := range keys {
		m, fresh, err := heldOrNew(kv, held, r.Cluster, k.name, k.ext, k.generate)
		if err != nil {
			return nil, nil, err
		}
		b.m[k.name] = m
		if fresh {
			writes = append(writes, entries(kv, r.Cluster, k.name, k.ext, m)...)
			issued = append(issued, k.name)
		}
	}
	b.byGeneration(signing, trusted)
	// Keys before certs: a crash between two transactions leaves a key
	// without its cert, which the next Issue replaces, never a cert
	// without its key.
	slices.SortStableFunc(writes, func(a, b state.Entry) int {
		switch {
		case a.Secret == b.Secret:
			return 0
		case a.Secret:
			return -1
		}
		return 1
	})
	if err := kv.PutMany(ctx, writes); err != nil {
		return nil, nil, fmt.Errorf("store PKI of %s: %w", r.Cluster, err)
	}
	// The generations no longer trusted are forgotten, their keys first:
	// a CA key kept after its rotation could still sign what the hosts
	// no longer trust, and no one should hold it.
	if stale := staleGenerations(kv, held, r.Cluster, trusted); len(stale) > 0 {
		d, ok := kv.(deleter)
		if !ok {
			return nil, nil, fmt.Errorf("PKI of %s: the store cannot delete the CAs no longer trusted", r.Cluster)
		}
		for _, k := range stale {
			if err := d.Delete(ctx, k); err != nil {
				return nil, nil, fmt.Errorf("forget a rotated CA of %s: %w", r.Cluster, err)
			}
		}
	}
	return b, issued, nil
}

// deleter is a store that deletes keys (state.Store and its overlay).
type deleter interface {
	Delete(ctx context.Context, key string) error
}

// Rotation says which generations of the CAs and the service account key
// a render holds (spec.pki; schemas.Spec.CAGenerations): Trusted are
// trusted, the first of them signs. Generation 1 is a cluster's first;
// the zero value is generation 1 alone. During a rotation to N: N-1 and
// N trusted, N-1 signing (trust), then N signing (reissue), then N alone.
type Rotation struct {
	Trusted []int
}

// generations returns the generation that signs and the ones trusted,
// the signing one first.
func (r Rotation) generations() (signing int, trusted []int) {
	if len(r.Trusted) == 0 {
		return 1, []int{1}
	}
	return r.Trusted[0], r.Trusted
}

// caSubjects are the CAs, each rotated by generation, with the common
// name of their first.
var caSubjects = []struct{ name, cn string }{{CA, "kubernetes"}, {EtcdCA, "etcd-ca"}, {FrontProxyCA, "front-proxy-ca"}}

// rotated are the names of the material that has generations: the CAs
// and the service account key.
var rotated = []string{CA, EtcdCA, FrontProxyCA, ServiceAccount}

// generationName is the name of generation g of the CA (or key, or
// common name) name: name itself for the first, as clusters made before
// rotations have it, then name.2, name.3...
func generationName(name string, g int) string {
	if g <= 1 {
		return name
	}
	return name + "." + strconv.Itoa(g)
}

// generationOf reads a store key of cluster's PKI as generation g of the
// rotated material base ("ca.2.key": ca, 2); ok is false for any other.
func generationOf(prefix, key string) (base string, g int, ok bool) {
	file, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return "", 0, false
	}
	stem := file[:max(strings.LastIndexByte(file, '.'), 0)]
	if slices.Contains(rotated, stem) {
		return stem, 1, true
	}
	i := strings.LastIndexByte(stem, '.')
	if i < 0 || !slices.Contains(rotated, stem[:i]) {
		return "", 0, false
	}
	n := stem[i+1:]
	if g, err := strconv.Atoi(n); err == nil && g > 1 && strconv.Itoa(g) == n {
		return stem[:i], g, true
	}
	return "", 0, false
}

// heldGenerations returns the generations of base that held has, newest
// first.
func heldGenerations(kv state.KV, held map[string][]byte, cluster, base string) []int {
	prefix := state.KeysOf(kv).PKI(cluster)
	var out []int
	for k := range held {
		if b, g, ok := generationOf(prefix, k); ok && b == base && !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	slices.Reverse(out)
	return out
}

// staleGenerations returns the store keys of the generations of the
// rotated material that are not trusted, keys (.key) first.
func staleGenerations(kv state.KV, held map[string][]byte, cluster string, trusted []int) []string {
	prefix := state.KeysOf(kv).PKI(cluster)
	var out []string
	for k := range held {
		if _, g, ok := generationOf(prefix, k); ok && !slices.Contains(trusted, g) {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		if ka, kb := strings.HasSuffix(a, ".key"), strings.HasSuffix(b, ".key"); ka != kb {
			if ka {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return out
}

// byGeneration files each rotated material under its own name (its
// signing generation's) and its trust (every trusted generation, the
// signing one first), dropping the generations' own names.
func (b *Bundle) byGeneration(signing int, trusted []int) {
	for _, base := range rotated {
		var trust []byte
		for _, g := range trusted {
			trust = append(trust, b.m[generationName(base, g)].Cert...)
		}
		sign := b.m[generationName(base, signing)]
		for _, g := range trusted {
			delete(b.m, generationName(base, g))
		}
		b.m[base], b.trust[base] = sign, trust
	}
}

// usable reports whether an existing cert may be kept: signed by the
// current CA, outside the renewal window, with the SANs and subject asked for.
func (r Request) usable(sp spec, cert, ca *x509.Certificate) bool {
	if r.Now.Add(r.RenewWithin).After(cert.NotAfter) || r.Now.Before(cert.NotBefore.Add(-time.Hour)) {
		return false
	}
	if sp.ca != "" && (ca == nil || !signedBy(cert, ca)) {
		return false
	}
	if cert.Subject.CommonName != sp.cn || !slices.Equal(cert.Subject.Organization, sp.orgs) {
		return false
	}
	return slices.Equal(cert.DNSNames, sp.dns) && sameIPs(cert.IPAddresses, sp.ips)
}

func sameIPs(have []net.IP, want []netip.Addr) bool {
	if len(have) != len(want) {
		return false
	}
	for i, ip := range have {
		a, _ := netip.AddrFromSlice(ip)
		if a.Unmap() != want[i].Unmap() {
			return false
		}
	}
	return true
}

// load takes a cert and its key from what the store holds; a missing one
// is (nil, nil). The key stays PEM: it is parsed only if it must sign.
func load(kv state.KV, held map[string][]byte, cluster, name string) (Material, *x509.Certificate, error) {
	ck, kk := state.KeysOf(kv).PKIFile(cluster, name+".crt"), state.KeysOf(kv).PKIFile(cluster, name+".key")
	certPEM, okCert := held[ck]
	sealed, okKey := held[kk]
	if !okCert || !okKey {
		return Material{}, nil, nil // a cert without its key is re-issued
	}
	keyPEM, err := kv.Open(kk, sealed)
	if err != nil {
		return Material{}, nil, fmt.Errorf("load %s key: %w", name, err)
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		return Material{}, nil, fmt.Errorf("load %s: %w", name, err)
	}
	if matchesKey(cert, keyPEM) != nil {
		return Material{}, nil, nil // a key that is not the cert's: re-issued
	}
	return Material{Cert: certPEM, Key: keyPEM}, cert, nil
}

// matchesKey checks, without the cost of deriving the public key from the
// private one, that keyPEM is an EC key whose public point is the cert's:
// the DER of an EC private key carries its public key.
func matchesKey(cert *x509.Certificate, keyPEM []byte) error {
	block, _ := pem.Decode(keyPEM)
	if block == nil || block.Type != "EC PRIVATE KEY" {
		return errors.New("key is not a PEM EC private key")
	}
	var k struct {
		Version    int
		PrivateKey []byte
		Params     asn1.ObjectIdentifier `asn1:"optional,explicit,tag:0"`
		PublicKey  asn1.BitString        `asn1:"optional,explicit,tag:1"`
	}
	if _, err := asn1.Unmarshal(block.Bytes, &k); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return errors.New("cert has no ECDSA key")
	}
	point, err := pub.Bytes()
	if err != nil || !bytes.Equal(point, k.PublicKey.Bytes) {
		return errors.New("key does not match the cert")
	}
	return nil
}

// verified remembers signature checks that passed, by the SHA-256 of the
// cert and of its CA, so a re-render does not verify again what it has
// verified before. It holds digests only, and is emptied when full.
var verified = struct {
	sync.Mutex
	m map[[64]byte]struct{}
}{m: map[[64]byte]struct{}{}}

const maxVerified = 1 << 17

// signedBy reports whether ca signed cert.
func signedBy(cert, ca *x509.Certificate) bool {
	var k [64]byte
	a, b := sha256.Sum256(cert.Raw), sha256.Sum256(ca.Raw)
	copy(k[:32], a[:])
	copy(k[32:], b[:])
	verified.Lock()
	_, ok := verified.m[k]
	verified.Unlock()
	if ok {
		return true
	}
	if cert.CheckSignatureFrom(ca) != nil {
		return false
	}
	verified.Lock()
	if len(verified.m) >= maxVerified {
		clear(verified.m)
	}
	verified.m[k] = struct{}{}
	verified.Unlock()
	return true
}

// entries are the writes that store m: the key sealed, the cert (or the
// public key, ext ".pub") plain.
func entries(kv state.KV, cluster, name, ext string, m Material) []state.Entry {
	return []state.Entry{
		{Key: state.KeysOf(kv).PKIFile(cluster, name+".key"), Value: m.Key, Secret: true},
		{Key: state.KeysOf(kv).PKIFile(cluster, name+ext), Value: m.Cert},
	}
}

func issue(sp spec, ca *x509.Certificate, caKey crypto.Signer, now time.Time) (Material, *x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Material{}, nil, nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return Material{}, nil, nil, fmt.Errorf("serial: %w", err)
	}
	validity := sp.validity
	if validity == 0 {
		validity = leafValidity
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: sp.cn, Organization: sp.orgs},
		NotBefore:    now.Add(-5 * time.Minute).UTC().Truncate(time.Second),
		NotAfter:     now.Add(validity).UTC().Truncate(time.Second),
		DNSNames:     sp.dns,
	}
	for _, ip := range sp.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
	}
	parent, signer := tmpl, crypto.Signer(key)
	if sp.ca == "" {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	} else {
		if ca == nil {
			return Material{}, nil, nil, fmt.Errorf("CA %s is missing", sp.ca)
		}
		parent, signer = ca, caKey
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		if sp.server {
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		}
		if sp.client {
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		return Material{}, nil, nil, fmt.Errorf("sign: %w", err)
	}
	cert, _ := x509.ParseCertificate(der)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Material{}, nil, nil, fmt.Errorf("marshal key: %w", err)
	}
	return Material{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, cert, key, nil
}

// heldOrNew returns the key name of cluster held in the store (its
// sealed name.key and its public part name+ext), or a new one from
// generate; fresh says it is new, to be written.
func heldOrNew(kv state.KV, held map[string][]byte, cluster, name, ext string, generate func() (Material, error)) (m Material, fresh bool, err error) {
	keys := state.KeysOf(kv)
	pubKey, privKey := keys.PKIFile(cluster, name+ext), keys.PKIFile(cluster, name+".key")
	pub, okPub := held[pubKey]
	sealed, okPriv := held[privKey]
	if okPub && okPriv {
		priv, err := kv.Open(privKey, sealed)
		if err != nil {
			return Material{}, false, fmt.Errorf("load %s.key: %w", name, err)
		}
		return Material{Cert: pub, Key: priv}, false, nil
	}
	if m, err = generate(); err != nil {
		return Material{}, false, fmt.Errorf("generate %s: %w", name, err)
	}
	return m, true, nil
}

// newServiceAccountKey is a service account signing key: P-256, its
// public half in Cert.
func newServiceAccountKey() (Material, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Material{}, err
	}
	pubDER, _ := x509.MarshalPKIXPublicKey(key.Public())
	privDER, _ := x509.MarshalECPrivateKey(key)
	return Material{Cert: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}),
		Key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: privDER})}, nil
}

// newSecretsKey is the key Secrets are encrypted with in etcd: 32 random
// bytes (base64, as the encryption configuration takes them) named key1.
func newSecretsKey() (Material, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return Material{}, err
	}
	return Material{Cert: []byte("key1"), Key: []byte(base64.StdEncoding.EncodeToString(raw))}, nil
}

func parseCert(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	return c, nil
}

func parseKey(b []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "EC PRIVATE KEY" {
		return nil, errors.New("not a PEM EC private key")
	}
	k, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse key: %w", err)
	}
	return k, nil
}

// Equal reports whether two bundles hold the same bytes.
func (b *Bundle) Equal(o *Bundle) bool {
	if len(b.m) != len(o.m) || len(b.trust) != len(o.trust) {
		return false
	}
	for n, t := range b.trust {
		if !bytes.Equal(t, o.trust[n]) {
			return false
		}
	}
	for n, m := range b.m {
		om, ok := o.m[n]
		if !ok || !bytes.Equal(m.Cert, om.Cert) || !bytes.Equal(m.Key, om.Key) {
			return false
		}
	}
	return true
}

// HostMaterial names the material issued for one host: what goes with
// its server.
func HostMaterial(host string) []string {
	return []string{EtcdServer(host), EtcdPeer(host), APIServer(host), Kubelet(host)}
}

// Load returns the named material the store holds for cluster, issuing
// nothing: OPKE's clients (backups, gates) use it outside a render.
func Load(ctx context.Context, kv state.KV, cluster string, names ...string) (*Bundle, error) {
	held, err := kv.List(ctx, state.KeysOf(kv).PKI(cluster))
	if err != nil {
		return nil, fmt.Errorf("load PKI of %s: %w", cluster, err)
	}
	b := &Bundle{m: map[string]Material{}, trust: map[string][]byte{}}
	for _, name := range names {
		if name != ServiceAccount && slices.Contains(rotated, name) {
			// A CA: every generation held is trusted (two during a
			// rotation), the newest first; the newest is the material.
			for i, g := range heldGenerations(kv, held, cluster, name) {
				m, cert, err := load(kv, held, cluster, generationName(name, g))
				if err != nil {
					return nil, err
				}
				if cert == nil {
					continue
				}
				if i == 0 {
					b.m[name] = m
				}
				b.trust[name] = append(b.trust[name], m.Cert...)
			}
			if _, ok := b.m[name]; !ok {
				return nil, fmt.Errorf("PKI of %s: %s: %w", cluster, name, state.ErrNotFound)
			}
			continue
		}
		m, cert, err := load(kv, held, cluster, name)
		if err != nil {
			return nil, err
		}
		if cert == nil {
			return nil, fmt.Errorf("PKI of %s: %s: %w", cluster, name, state.ErrNotFound)
		}
		b.m[name] = m
	}
	return b, nil
}

// TLS is a client configuration that trusts ca and presents client.
func (b *Bundle) TLS(ca, client string) (*tls.Config, error) {
	_, ok1 := b.m[ca]
	cl, ok2 := b.m[client]
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("TLS with %s trusting %s: not in the bundle", client, ca)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b.Trust(ca)) {
		return nil, fmt.Errorf("%s: no certificate", ca)
	}
	pair, err := tls.X509KeyPair(cl.Cert, cl.Key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", client, err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}
