package sshx

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// testServer starts an SSH server on a loopback port (over TCP: both ends
// of a handshake write first, which net.Pipe would deadlock), hands its
// channels and global requests to serve, and returns a client of it. The
// connection closes when serve returns.
func testServer(t *testing.T, serve func(chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request)) *ssh.Client {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(hostKey)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		t.Cleanup(func() { nc.Close() })
		_, chans, reqs, err := ssh.NewServerConn(nc, cfg)
		if err != nil {
			return
		}
		serve(chans, reqs)
		nc.Close()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc, chans, reqs, err := ssh.NewClientConn(c, "host", &ssh.ClientConfig{User: "core", HostKeyCallback: ssh.FixedHostKey(hostKey.PublicKey())})
	if err != nil {
		t.Fatal(err)
	}
	client := ssh.NewClient(cc, chans, reqs)
	t.Cleanup(func() { client.Close() })
	return client
}

// TestAlive: a server that answers global requests (as OpenSSH answers
// keepalive@openssh.com, with a failure) is alive; one that stops
// answering is not, within the timeout.
func TestAlive(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		answers bool
	}{{"answers", true}, {"silent", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			done := make(chan struct{})
			defer close(done)
			client := testServer(t, func(chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) {
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
			})
			if got := Alive(client, 500*time.Millisecond); got != tc.answers {
				t.Errorf("Alive = %v, want %v", got, tc.answers)
			}
		})
	}
}

// TestRunRetriesRefusedSession: a server refusing sessions for a moment
// as OpenSSH does past MaxSessions ("open failed") gets the session
// asked again; one refusing for another reason does not.
func TestRunRetriesRefusedSession(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		reason ssh.RejectionReason
		ok     bool
	}{{"max sessions", ssh.ConnectionFailed, true}, {"prohibited", ssh.Prohibited, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			client := testServer(t, func(chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) {
				go ssh.DiscardRequests(reqs)
				refused := 0
				for nch := range chans {
					if refused < 2 {
						refused++
						_ = nch.Reject(tc.reason, "open failed")
						continue
					}
					ch, creqs, err := nch.Accept()
					if err != nil {
						return
					}
					go func() {
						for r := range creqs {
							_ = r.Reply(r.Type == "exec", nil)
							if r.Type == "exec" {
								_, _ = ch.Write([]byte("ran\n"))
								_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{0}))
								_ = ch.Close()
							}
						}
					}()
				}
			})
			out, err := Run(t.Context(), client, "true")
			if tc.ok && (err != nil || string(out) != "ran\n") {
				t.Errorf("after two refusals: %q %v, want the command run", out, err)
			}
			if !tc.ok && err == nil {
				t.Error("a session refused as prohibited was asked again")
			}
		})
	}
}

// TestRunOnALostConnection: a connection that goes while a session opens
// or while its command runs (the host went away) is ErrConnectionLost,
// which a caller tries again on a new connection; a refusal is not.
func TestRunOnALostConnection(t *testing.T) {
	t.Parallel()
	client := testServer(t, func(chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) {
		go ssh.DiscardRequests(reqs)
		<-chans // the session asked for, never answered: the connection closes
	})
	_, err := Run(t.Context(), client, "true")
	if !errors.Is(err, ErrConnectionLost) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Run on a connection closed while its session opened: %v, want ErrConnectionLost", err)
	}
	forwarding := testServer(t, func(chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) {
		go ssh.DiscardRequests(reqs)
		<-chans // the forwarding asked for, never answered
	})
	if _, err := Forward(t.Context(), forwarding, "10.0.0.1:6443"); !errors.Is(err, ErrConnectionLost) {
		t.Errorf("Forward on a connection closed while its channel opened: %v, want ErrConnectionLost", err)
	}
	// The connection goes while the command runs: its session closes
	// with no exit status.
	cut := testServer(t, func(chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) {
		go ssh.DiscardRequests(reqs)
		for nch := range chans {
			ch, creqs, err := nch.Accept()
			if err != nil {
				return
			}
			go func() {
				for r := range creqs {
					_ = r.Reply(r.Type == "exec", nil)
					if r.Type == "exec" {
						_ = ch.Close()
					}
				}
			}()
		}
	})
	if _, err := Run(t.Context(), cut, "install -D /dev/stdin /etc/x"); !errors.Is(err, ErrConnectionLost) {
		t.Errorf("Run whose session closed with no exit status: %v, want ErrConnectionLost", err)
	}
	refused := testServer(t, func(chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) {
		go ssh.DiscardRequests(reqs)
		for nch := range chans {
			_ = nch.Reject(ssh.Prohibited, "no")
		}
	})
	if _, err := Run(t.Context(), refused, "true"); err == nil || errors.Is(err, ErrConnectionLost) {
		t.Errorf("Run refused a session: %v, want a refusal, not ErrConnectionLost", err)
	}
}
