package sshx

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// ErrNoHostKey is console output without SSH host key lines.
var ErrNoHostKey = errors.New("no SSH host key in the console output")

// journalPrefix is how journald prefixes a line it forwards to the console.
var journalPrefix = regexp.MustCompile(`^\[\s*[0-9.]+\] [^\s:]+\[[0-9]+\]: `)

func isKeyType(s string) bool {
	return strings.HasPrefix(s, "ssh-") || strings.HasPrefix(s, "ecdsa-") || strings.HasPrefix(s, "sk-")
}

// HostKeysFromConsole reads the host keys a booting cloud image prints
// between -----BEGIN SSH HOST KEY KEYS----- and -----END SSH HOST KEY KEYS-----.
func HostKeysFromConsole(output string) ([]ssh.PublicKey, error) {
	var keys []ssh.PublicKey
	in := false
	sc := bufio.NewScanner(strings.NewReader(output))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasSuffix(line, "-----BEGIN SSH HOST KEY KEYS-----"):
			in = true
		case strings.HasSuffix(line, "-----END SSH HOST KEY KEYS-----"):
			in = false
		case in:
			// A unit's output forwarded by journald (StandardOutput=
			// journal+console) carries its prefix: "[  12.3] sh[101]: ".
			if m := journalPrefix.FindString(line); m != "" {
				line = line[len(m):]
			}
			if keyType, _, _ := strings.Cut(line, " "); !isKeyType(keyType) {
				continue // another unit's line, interleaved on the console
			}
			k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
			if err != nil {
				return nil, fmt.Errorf("host key line %.40q: %w", line, err)
			}
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, ErrNoHostKey
	}
	return keys, nil
}

// Auth is who OPKE is and which host key it expects.
type Auth struct {
	User   string
	Signer ssh.Signer
	// HostKeys are the pinned keys; a server presenting another is refused.
	HostKeys []ssh.PublicKey
}

// ErrHostKeyMismatch is a server whose key is not the pinned one.
var ErrHostKeyMismatch = errors.New("host key does not match the pinned key")

func (a Auth) config() (*ssh.ClientConfig, error) {
	if len(a.HostKeys) == 0 {
		return nil, errors.New("ssh: no pinned host key")
	}
	algos := make([]string, 0, len(a.HostKeys))
	for _, k := range a.HostKeys {
		algos = append(algos, k.Type())
	}
	return &ssh.ClientConfig{
		User: a.User,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(a.Signer)},
		HostKeyCallback: func(host string, _ net.Addr, key ssh.PublicKey) error {
			for _, k := range a.HostKeys {
				if k.Type() == key.Type() && string(k.Marshal()) == string(key.Marshal()) {
					return nil
				}
			}
			return fmt.Errorf("%s: %w (got %s)", host, ErrHostKeyMismatch, ssh.FingerprintSHA256(key))
		},
		HostKeyAlgorithms: algos,
		Timeout:           30 * time.Second,
	}, nil
}

// Dial opens an SSH client to address (the gateway's floating IP) through d.
func Dial(ctx context.Context, d Dialer, address string, a Auth) (*ssh.Client, error) {
	cfg, err := a.config()
	if err != nil {
		return nil, err
	}
	conn, err := d.DialContext(ctx, "tcp", address)
	if err != nil {
		return nil, err
	}
	return handshake(ctx, conn, address, cfg)
}

// Jump opens an SSH client to address (a host's fixed IP) through the
// gateway's direct-tcpip forwarding.
func Jump(ctx context.Context, gw *ssh.Client, address string, a Auth) (*ssh.Client, error) {
	cfg, err := a.config()
	if err != nil {
		return nil, err
	}
	conn, err := Forward(ctx, gw, address)
	if err != nil {
		return nil, fmt.Errorf("through the gateway to %s: %w", address, err)
	}
	return handshake(ctx, conn, address, cfg)
}

// handshake runs the SSH handshake on conn, bounded by ctx.
func handshake(ctx context.Context, conn net.Conn, address string, cfg *ssh.ClientConfig) (*ssh.Client, error) {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	c, chans, reqs, err := ssh.NewClientConn(conn, address, cfg)
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("ssh %s: %w", address, ctx.Err())
		}
		return nil, fmt.Errorf("ssh %s: %w", address, err)
	}
	return ssh.NewClient(c, chans, reqs), nil
}

// Forward opens a TCP connection to address through c's direct-tcpip
// forwarding. A failure that is not c's peer refusing the channel is c's
// connection gone: ErrConnectionLost.
func Forward(ctx context.Context, c *ssh.Client, address string) (net.Conn, error) {
	conn, err := c.DialContext(ctx, "tcp", address)
	var open *ssh.OpenChannelError
	if err != nil && !errors.As(err, &open) && ctx.Err() == nil {
		return nil, fmt.Errorf("%w (%w)", ErrConnectionLost, err)
	}
	return conn, err
}

// Run runs a command on c and returns its stdout; a non-zero exit is an
// error carrying stderr.
func Run(ctx context.Context, c *ssh.Client, command string) ([]byte, error) {
	return RunInput(ctx, c, command, nil)
}

// RunInput is Run with stdin: secrets go to a command this way, never on
// its command line (which other users of the host can read).
func RunInput(ctx context.Context, c *ssh.Client, command string, stdin []byte) ([]byte, error) {
	sess, err := newSession(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("ssh session: %w", err)
	}
	defer sess.Close()
	if stdin != nil {
		sess.Stdin = bytes.NewReader(stdin)
	}
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	var stdout, stderr strings.Builder
	sess.Stdout, sess.Stderr = &stdout, &stderr
	if err := sess.Run(command); err != nil {
		// A session that ended with no exit status: its connection went
		// while the command ran (an OpenSSH server always sends one), so
		// whether it finished is not known, and a try again on a new
		// connection runs it again (OPKE's commands are idempotent).
		var missing *ssh.ExitMissingError
		if errors.As(err, &missing) && ctx.Err() == nil {
			err = fmt.Errorf("%w (%w)", ErrConnectionLost, err)
		}
		return []byte(stdout.String()), fmt.Errorf("%s: %w: %s", command, err, strings.TrimSpace(stderr.String()))
	}
	return []byte(stdout.String()), nil
}

// ErrConnectionLost is a session that did not open because its
// connection is gone (the host or the gateway went away, the network
// cut it): no answer came, so a try on a new connection may pass. It
// wraps io.ErrUnexpectedEOF, which callers take as transient.
var ErrConnectionLost = fmt.Errorf("ssh connection lost: %w", io.ErrUnexpectedEOF)

// newSession opens a session on c. OpenSSH refuses one past its
// MaxSessions (10 by default) with "open failed" (ConnectionFailed), also
// for a moment after sessions closed on the client's side and not yet on
// the server's: that refusal is tried again, a few times, backing off.
// Any failure but a refusal is the connection lost (x/crypto/ssh answers
// "unexpected packet in response to channel open: <nil>" when it closed
// while the channel opened): ErrConnectionLost.
func newSession(ctx context.Context, c *ssh.Client) (*ssh.Session, error) {
	wait := 50 * time.Millisecond
	for try := 1; ; try++ {
		sess, err := c.NewSession()
		var open *ssh.OpenChannelError
		if err != nil && !errors.As(err, &open) {
			return nil, fmt.Errorf("%w (%w)", ErrConnectionLost, err)
		}
		if err == nil || try == 6 || open.Reason != ssh.ConnectionFailed {
			return sess, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(ctx.Err(), err)
		case <-t.C:
		}
		wait *= 2
	}
}

// Alive asks the peer of c whether it is still there, as OpenSSH's
// ServerAliveInterval does (a keepalive@openssh.com request, which a
// server answers even when it does not know it), and reports whether an
// answer came within timeout.
func Alive(c *ssh.Client, timeout time.Duration) bool {
	answered := make(chan error, 1)
	go func() {
		_, _, err := c.SendRequest("keepalive@openssh.com", true, nil)
		answered <- err
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-answered:
		return err == nil
	case <-t.C:
		return false
	}
}
