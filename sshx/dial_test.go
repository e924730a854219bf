package sshx

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// TestDialerRefusesNonLoopback: every address outside the allow list is
// refused before a socket exists (the control hook never runs), directly
// and as a proxy; a loopback address connects.
func TestDialerRefusesNonLoopback(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() }) // the subtests run after this function returns
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for _, tc := range []struct {
		name, proxy, address string
		wantErr              error
		sockets              int
	}{
		{name: "a floating IP directly", address: "203.0.113.10:22", wantErr: ErrForbiddenAddress},
		{name: "a private address", address: "192.168.10.10:22", wantErr: ErrForbiddenAddress},
		{name: "IPv6 loopback is not on the list", address: "[::1]:22", wantErr: ErrForbiddenAddress},
		{name: "a name is not resolved", address: "example.com:443", wantErr: ErrForbiddenAddress},
		{name: "a proxy off loopback", proxy: "10.0.0.1:1080", address: "127.0.0.1:22", wantErr: ErrForbiddenAddress},
		{name: "loopback", address: ln.Addr().String(), sockets: 1},
		{name: "localhost", address: "localhost:" + portOf(ln), sockets: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var dialled []string
			d := Dialer{Proxy: tc.proxy, control: func(a string) { mu.Lock(); dialled = append(dialled, a); mu.Unlock() }}
			c, err := d.DialContext(context.Background(), "tcp", tc.address)
			if c != nil {
				c.Close()
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("dial: %v, want %v", err, tc.wantErr)
			}
			if len(dialled) != tc.sockets {
				t.Errorf("sockets connected: %v, want %d", dialled, tc.sockets)
			}
		})
	}
}

// TestDialerThroughProxy: the target travels inside the SOCKS5 request;
// the only socket goes to the proxy on loopback.
func TestDialerThroughProxy(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 3)
		_, _ = io.ReadFull(c, buf) // greeting: 5, 1, 0
		_, _ = c.Write([]byte{5, 0})
		req := make([]byte, 10) // 5, 1, 0, 1, 4 bytes IPv4, 2 bytes port
		_, _ = io.ReadFull(c, req)
		got <- req
		_, _ = c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	}()
	var dialled []string
	d := Dialer{Proxy: ln.Addr().String(), control: func(a string) { dialled = append(dialled, a) }}
	c, err := d.DialContext(context.Background(), "tcp", "203.0.113.10:22")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	req := <-got
	if want := []byte{5, 1, 0, 1, 203, 0, 113, 10, 0, 22}; string(req) != string(want) {
		t.Errorf("SOCKS5 request %v, want %v", req, want)
	}
	if len(dialled) != 1 || dialled[0] != ln.Addr().String() {
		t.Errorf("sockets: %v, want only the proxy", dialled)
	}
}

func portOf(ln net.Listener) string {
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}

func TestHostKeysFromConsole(t *testing.T) {
	t.Parallel()
	out := "boot\n-----BEGIN SSH HOST KEY KEYS-----\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEf4mS9KkD1lV6l0pQn5bqg3Sx2dy9x+hXqD1EdzZkCG root@h\n-----END SSH HOST KEY KEYS-----\nlogin: \n"
	keys, err := HostKeysFromConsole(out)
	if err != nil || len(keys) != 1 || keys[0].Type() != "ssh-ed25519" {
		t.Fatalf("keys %v, %v", keys, err)
	}
	// As a real console has it: journald's prefix on a unit's lines, and
	// another unit's line in between.
	forwarded := "[   12.5] sh[101]: -----BEGIN SSH HOST KEY KEYS-----\n[   12.6] sh[102]: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEf4mS9KkD1lV6l0pQn5bqg3Sx2dy9x+hXqD1EdzZkCG root@h\n" +
		"[  OK  ] Started ssh.service - OpenBSD Secure Shell server.\n[   12.7] sh[101]: -----END SSH HOST KEY KEYS-----\n"
	if keys, err := HostKeysFromConsole(forwarded); err != nil || len(keys) != 1 || keys[0].Type() != "ssh-ed25519" {
		t.Fatalf("keys forwarded by journald: %v, %v", keys, err)
	}
	if _, err := HostKeysFromConsole("boot\nlogin: \n"); !errors.Is(err, ErrNoHostKey) {
		t.Errorf("no keys: %v", err)
	}
	if _, err := HostKeysFromConsole("-----BEGIN SSH HOST KEY KEYS-----\nssh-ed25519 garbage\n-----END SSH HOST KEY KEYS-----\n"); err == nil {
		t.Error("a damaged key line was accepted")
	}
}
