package sshx

import (
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestAlive: a server that answers global requests (as OpenSSH answers
// keepalive@openssh.com, with a failure) is alive; one that stops
// answering is not, within the timeout.
func TestAlive(t *testing.T) {
	t.Parallel()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		answers bool
	}{{"answers", true}, {"silent", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Over TCP: both ends of an SSH handshake write first, which
			// net.Pipe (unbuffered) would deadlock.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			accepted := make(chan net.Conn, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					close(accepted)
					return
				}
				accepted <- c
			}()
			cconn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer cconn.Close()
			sconn, ok := <-accepted
			if !ok {
				t.Fatal("no connection accepted")
			}
			defer sconn.Close()
			done := make(chan struct{})
			defer close(done)
			cfg := &ssh.ServerConfig{NoClientAuth: true}
			cfg.AddHostKey(hostKey)
			go func() {
				_, chans, reqs, err := ssh.NewServerConn(sconn, cfg)
				if err != nil {
					return
				}
				go func() {
					for c := range chans {
						_ = c.Reject(ssh.Prohibited, "no")
					}
				}()
				if tc.answers {
					ssh.DiscardRequests(reqs) // replies false, as OpenSSH does to what it does not know
					return
				}
				<-done // a peer gone quiet: nothing answered
			}()
			c, chans, reqs, err := ssh.NewClientConn(cconn, "host", &ssh.ClientConfig{User: "core", HostKeyCallback: ssh.FixedHostKey(hostKey.PublicKey())})
			if err != nil {
				t.Fatal(err)
			}
			client := ssh.NewClient(c, chans, reqs)
			defer client.Close()
			if got := Alive(client, 500*time.Millisecond); got != tc.answers {
				t.Errorf("Alive = %v, want %v", got, tc.answers)
			}
		})
	}
}
