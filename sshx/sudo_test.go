package sshx

import (
	"strings"
	"testing"
)

func TestInstall(t *testing.T) {
	for _, tc := range []struct {
		file, group, owner, wantGroup string
		ok                            bool
	}{
		{"/etc/kubernetes/pki/ca.key", "", "root", "root", true},
		{"/home/core/.ssh/authorized_keys.d/opke-operators", "", "core", "core", true},
		{"/home/corex/x", "", "root", "root", true},
		{"/etc/kubernetes/cloud.conf", "1001", "root", "1001", true},
		{"/etc/kubernetes/cloud.conf", "etcd", "root", "etcd", true},
		{"/etc/kubernetes/cloud.conf", "1001;reboot", "", "", false},
		{"/etc/kubernetes/cloud.conf", "-r", "", "", false},
		{"etc/relative", "", "", "", false},
		{"/etc/../etc/x", "", "", "", false},
		{"/etc/a b", "", "", "", false},
		{"/etc/$(id)", "", "", "", false},
		{"/etc/x;reboot", "", "", "", false},
	} {
		cmd, tmp, err := InstallGroup("core", tc.file, tc.group, 0o600)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.file, err)
			continue
		}
		if !tc.ok {
			continue
		}
		want := "sudo -n install -D -m 0600 -o " + tc.owner + " -g " + tc.wantGroup + " -- /dev/stdin " + tmp + " && sync && sudo -n mv -f -- " + tmp + " " + tc.file
		if cmd != want {
			t.Errorf("%s:\n got %s\nwant %s", tc.file, cmd, want)
		}
		if !strings.HasPrefix(tmp, tc.file[:strings.LastIndex(tc.file, "/")+1]+".") {
			t.Errorf("%s: the temporary file %s is not beside it", tc.file, tmp)
		}
	}
}
