package sshx

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
)

// The host user is unprivileged, as Flatcar's core is: what OPKE writes
// outside its home, and every unit it starts, goes through passwordless
// sudo. These are the command lines it sends; the in-process hosts follow
// exactly these (cloudsim), and the host contract suite runs them on both
// kinds of host.

// unquotable is what a shell would read as more than a plain word: paths
// holding any of it are refused rather than quoted.
const unquotable = " \t\n'\"$`;|&<>(){}*?\\!~#"

// Install is the command line that writes a file from the session's stdin
// (never its command line: others on the host can read that) as root:
// install(1) behind sudo makes a temporary file beside the target with its
// final mode and owner, sync flushes it, and a rename puts it in place. A
// file under the user's home stays the user's. tmp is the temporary file,
// for the caller to remove if the command fails.
func Install(user, file string, mode fs.FileMode) (cmd, tmp string, err error) {
	return InstallGroup(user, file, "", mode)
}

// InstallGroup is Install with the file's group set to group (a name or
// a numeric id), for a file a service of another group reads; "" is the
// owner's.
func InstallGroup(user, file, group string, mode fs.FileMode) (cmd, tmp string, err error) {
	if !path.IsAbs(file) || path.Clean(file) != file || strings.ContainsAny(file, unquotable) {
		return "", "", fmt.Errorf("install %q: not a plain absolute path", file)
	}
	if group != "" && !groupRE.MatchString(group) {
		return "", "", fmt.Errorf("install %q: group %q is not a group name or id", file, group)
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	tmp = path.Join(path.Dir(file), "."+path.Base(file)+".opke-"+hex.EncodeToString(suffix[:]))
	owner := "root"
	if strings.HasPrefix(file, "/home/"+user+"/") {
		owner = user
	}
	if group == "" {
		group = owner
	}
	cmd = fmt.Sprintf("sudo -n install -D -m %04o -o %s -g %s -- /dev/stdin %s && sync && sudo -n mv -f -- %s %s",
		mode.Perm(), owner, group, tmp, tmp, file)
	return cmd, tmp, nil
}

// groupRE is a POSIX group name or a numeric id.
var groupRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$|^[0-9]{1,10}$`)

// Sudo is a command line run as root.
func Sudo(command string) string { return "sudo -n " + command }
