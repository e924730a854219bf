// Package sshx is how OPKE reaches a cluster's hosts: over SSH to the
// cluster's gateway (its floating IP, optionally through a SOCKS5 proxy),
// then through the gateway's direct-tcpip forwarding to a host's fixed IP.
// It has a top-level folder because SSH is a boundary of its own: every
// byte OPKE sends to a host crosses here.
//
// Two rules hold for every connection:
//
//   - Host keys are pinned. They come from the server's console output
//     (HostKeysFromConsole) at first contact and are checked on every
//     connection; there is no InsecureIgnoreHostKey anywhere.
//
//   - The dialer refuses any address outside its allow list (default:
//     127.0.0.0/8) before a socket exists, and host names other than
//     localhost are refused rather than resolved. A SOCKS5 proxy is dialled
//     under the same rule; the address behind it travels inside the proxy
//     protocol and is never dialled by OPKE.
//
//     d := sshx.Dialer{Proxy: "127.0.0.1:1080"}
//     gw, err := sshx.Dial(ctx, d, "203.0.113.10:22", sshx.Auth{User: "core", Signer: key, HostKey: gwKey})
//     host, err := sshx.Jump(ctx, gw, "192.168.10.10:22", sshx.Auth{User: "core", Signer: key, HostKey: hostKey})
package sshx
