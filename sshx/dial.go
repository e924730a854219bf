package sshx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/net/proxy"
)

// ErrForbiddenAddress is a dial to an address outside the allow list.
var ErrForbiddenAddress = errors.New("address not allowed")

// loopback is the default allow list.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// Dialer opens TCP connections under the allow list, directly or through a
// SOCKS5 proxy. The zero value dials loopback addresses only, directly.
type Dialer struct {
	// Proxy is a SOCKS5 proxy's address (host:port); empty: direct.
	Proxy string
	// Allow lists the addresses a socket may connect to; nil: Loopback.
	Allow []netip.Prefix

	// control, when set, is called for each socket about to connect;
	// tests count on it.
	control func(address string)
}

func (d Dialer) allowed(a netip.Addr) bool {
	allow := d.Allow
	if allow == nil {
		allow = loopback
	}
	for _, p := range allow {
		if p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// check refuses an address before any socket is made: it must be an IP
// literal (or localhost) inside the allow list.
func (d Dialer) check(address string) error {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: %w", address, err)
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("dial %s: names are not resolved, only addresses are dialled: %w", address, ErrForbiddenAddress)
	}
	if !d.allowed(a) {
		return fmt.Errorf("dial %s: %w", net.JoinHostPort(a.String(), port), ErrForbiddenAddress)
	}
	return nil
}

// direct dials address itself, after check, with a second check on the
// socket's final address (in case anything rewrote it).
func (d Dialer) direct(ctx context.Context, network, address string) (net.Conn, error) {
	if err := d.check(address); err != nil {
		return nil, err
	}
	nd := net.Dialer{Control: func(_, addr string, _ syscall.RawConn) error {
		if d.control != nil {
			d.control(addr)
		}
		return d.check(addr)
	}}
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil, fmt.Errorf("dial %s %s: only tcp", network, address)
	}
	return nd.DialContext(ctx, network, address)
}

// DialContext connects to address: through the proxy when one is set
// (the proxy's address must be allowed; address is sent to the proxy),
// else directly (address must be allowed).
func (d Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if d.Proxy == "" {
		return d.direct(ctx, network, address)
	}
	if err := d.check(d.Proxy); err != nil {
		return nil, fmt.Errorf("SOCKS5 proxy: %w", err)
	}
	p, err := proxy.SOCKS5("tcp", d.Proxy, nil, forward{d})
	if err != nil {
		return nil, fmt.Errorf("SOCKS5 proxy %s: %w", d.Proxy, err)
	}
	c, err := p.(proxy.ContextDialer).DialContext(ctx, network, address)
	if err != nil {
		return nil, fmt.Errorf("dial %s through %s: %w", address, d.Proxy, err)
	}
	return c, nil
}

// forward makes the proxy package dial the proxy through the guard.
type forward struct{ d Dialer }

func (f forward) Dial(network, address string) (net.Conn, error) {
	return f.d.direct(context.Background(), network, address)
}

func (f forward) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return f.d.direct(ctx, network, address)
}
