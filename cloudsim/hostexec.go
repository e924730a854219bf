package cloudsim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
)

// The in-process host's exec: a command line of simple commands joined by
// &&, each run as core, or as root behind sudo (core has passwordless
// sudo, as on Flatcar). Core writes only its home and the temporary
// folders and reads only what others may read, as Unix permissions on a
// Flatcar host have it: the host contract suite holds this to a real
// machine. Any other shell syntax is refused, so OPKE never comes to rely
// on more than this host can follow.

// coreWritable are the folders core may write without sudo.
var coreWritable = []string{"home/core", "tmp", "var/tmp"}

// shellSyntax is what this host's exec does not interpret.
const shellSyntax = "'\"$`;|<>(){}*?\\!~#"

// writable reports whether core (priv: root) may write p (a path under
// the root).
func writable(p string, priv bool) bool {
	if priv {
		return true
	}
	for _, d := range coreWritable {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// readable reports whether core (priv: root) may read p: root reads all,
// core what it may write and what others may read.
func (h *simHost) readable(p string, priv bool) bool {
	if priv || writable(p, false) {
		return true
	}
	fi, err := h.root.Stat(p)
	return err != nil || fi.Mode().Perm()&0o004 != 0 // a missing file is reported as missing
}

// exec runs a command line and records what systemctl did.
func (h *simHost) exec(line string, stdin io.Reader, stdout, stderr io.Writer) int {
	if strings.ContainsAny(line, shellSyntax) {
		fmt.Fprintf(stderr, "sh: this host runs simple commands joined by && only: %q\n", line)
		return 2
	}
	for _, part := range strings.Split(line, "&&") {
		if code := h.execOne(strings.Fields(part), stdin, stdout, stderr); code != 0 {
			return code
		}
	}
	return 0
}

func (h *simHost) execOne(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return 0
	}
	priv := false
	if args[0] == "sudo" {
		args, priv = args[1:], true
		if len(args) > 0 && args[0] == "-n" {
			args = args[1:]
		}
		if len(args) == 0 {
			fmt.Fprintln(stderr, "usage: sudo -n command")
			return 1
		}
	}
	ev := HostEvent{Time: h.s.opts.Now().UTC(), Command: strings.Join(args, " "), Sudo: priv}
	code := 0
	switch args[0] {
	case "systemctl":
		code = h.systemctl(args[1:], priv, &ev, stdout, stderr)
	case "sha256sum":
		code = h.eachFile("sha256sum", operands(args[1:]), priv, stderr, func(p string, b []byte) {
			sum := sha256.Sum256(b)
			fmt.Fprintf(stdout, "%s  %s\n", hex.EncodeToString(sum[:]), p)
		})
	case "cat":
		code = h.eachFile("cat", operands(args[1:]), priv, stderr, func(_ string, b []byte) { _, _ = stdout.Write(b) })
	case "install":
		code = h.install(args[1:], priv, stdin, stderr)
	case "mv":
		code = h.mv(args[1:], priv, stderr)
	case "rm":
		code = h.rm(args[1:], priv, stderr)
	case "touch":
		for _, p := range operands(args[1:]) {
			if !writable(rel(p), priv) {
				fmt.Fprintf(stderr, "touch: cannot touch '%s': Permission denied\n", p)
				code = 1
				continue
			}
			f, err := h.root.OpenFile(rel(p), os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				fmt.Fprintf(stderr, "touch: cannot touch '%s': No such file or directory\n", p)
				code = 1
				continue
			}
			f.Close()
		}
	case "sync", "true":
		// Writes are on disk once acknowledged.
	default:
		fmt.Fprintf(stderr, "sh: %s: command not found\n", args[0])
		code = 127
	}
	ev.Exit = code
	if args[0] == "systemctl" {
		h.record(ev)
	}
	return code
}

// operands drops the options and "--" of a coreutils command line.
func operands(args []string) []string {
	var out []string
	opts := true
	for _, a := range args {
		switch {
		case opts && a == "--":
			opts = false
		case opts && strings.HasPrefix(a, "-") && a != "-":
		default:
			out = append(out, a)
		}
	}
	return out
}

// install is coreutils' install SRC DST with -D, -m MODE, -o and -g
// (root only); SRC /dev/stdin reads the session's input.
func (h *simHost) install(args []string, priv bool, stdin io.Reader, stderr io.Writer) int {
	mode, parents, owner := os.FileMode(0o755), false, false
	var files []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--":
			files = append(files, args[i+1:]...)
			i = len(args)
		case a == "-D":
			parents = true
		case a == "-m" || a == "-o" || a == "-g":
			if i+1 == len(args) {
				fmt.Fprintf(stderr, "install: option requires an argument -- '%s'\n", a[1:])
				return 1
			}
			i++
			if a == "-m" {
				m, err := strconv.ParseUint(args[i], 8, 32)
				if err != nil || m > 0o7777 {
					fmt.Fprintf(stderr, "install: invalid mode '%s'\n", args[i])
					return 1
				}
				mode = os.FileMode(m)
			} else {
				owner = true
			}
		case strings.HasPrefix(a, "-"):
			fmt.Fprintf(stderr, "install: this host knows -D, -m, -o and -g, not %s\n", a)
			return 1
		default:
			files = append(files, a)
		}
	}
	if len(files) != 2 {
		fmt.Fprintln(stderr, "install: want SOURCE DEST")
		return 1
	}
	src, dst := files[0], rel(files[1])
	if owner && !priv {
		fmt.Fprintf(stderr, "install: cannot change ownership of '%s': Operation not permitted\n", files[1])
		return 1
	}
	if !writable(dst, priv) {
		fmt.Fprintf(stderr, "install: cannot create regular file '%s': Permission denied\n", files[1])
		return 1
	}
	var data []byte
	var err error
	if src == "/dev/stdin" {
		data, err = io.ReadAll(stdin)
	} else if !h.readable(rel(src), priv) {
		fmt.Fprintf(stderr, "install: cannot open '%s' for reading: Permission denied\n", src)
		return 1
	} else {
		data, err = h.root.ReadFile(rel(src))
	}
	if err != nil {
		fmt.Fprintf(stderr, "install: cannot stat '%s': %v\n", src, err)
		return 1
	}
	if parents {
		if err := h.root.MkdirAll(path.Dir(dst), 0o755); err != nil {
			fmt.Fprintf(stderr, "install: cannot create directory '%s': %v\n", path.Dir(files[1]), err)
			return 1
		}
	}
	f, err := h.root.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err == nil {
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = h.root.Chmod(dst, mode)
	}
	if err != nil {
		fmt.Fprintf(stderr, "install: cannot create regular file '%s': %v\n", files[1], err)
		return 1
	}
	h.manifestWritten(dst)
	return 0
}

// mv renames SRC over DST (-f).
func (h *simHost) mv(args []string, priv bool, stderr io.Writer) int {
	files := operands(args)
	if len(files) != 2 {
		fmt.Fprintln(stderr, "mv: want SOURCE DEST")
		return 1
	}
	src, dst := rel(files[0]), rel(files[1])
	if !writable(src, priv) || !writable(dst, priv) {
		fmt.Fprintf(stderr, "mv: cannot move '%s' to '%s': Permission denied\n", files[0], files[1])
		return 1
	}
	if err := h.root.Rename(src, dst); err != nil {
		fmt.Fprintf(stderr, "mv: cannot move '%s' to '%s': %v\n", files[0], files[1], err)
		return 1
	}
	h.manifestWritten(dst)
	return 0
}

// rm removes files (-f: a missing one is no error).
func (h *simHost) rm(args []string, priv bool, stderr io.Writer) int {
	force := false
	for _, a := range args {
		force = force || a == "-f"
	}
	code := 0
	for _, p := range operands(args) {
		if !writable(rel(p), priv) {
			fmt.Fprintf(stderr, "rm: cannot remove '%s': Permission denied\n", p)
			code = 1
			continue
		}
		if err := h.root.Remove(rel(p)); err != nil && !(force && os.IsNotExist(err)) {
			fmt.Fprintf(stderr, "rm: cannot remove '%s': %v\n", p, err)
			code = 1
		}
	}
	return code
}

// eachFile calls fn with each path's content, as coreutils do: a missing
// or unreadable file is reported and makes the exit code 1, the others
// still go.
func (h *simHost) eachFile(cmd string, paths []string, priv bool, stderr io.Writer, fn func(string, []byte)) int {
	code := 0
	for _, p := range paths {
		if !h.readable(rel(p), priv) {
			fmt.Fprintf(stderr, "%s: %s: Permission denied\n", cmd, p)
			code = 1
			continue
		}
		b, err := h.root.ReadFile(rel(p))
		if err != nil {
			fmt.Fprintf(stderr, "%s: %s: No such file or directory\n", cmd, p)
			code = 1
			continue
		}
		fn(p, b)
	}
	return code
}
