package assets_test

import (
	"errors"
	"strings"
	"testing"

	"opke.dev/opke/render/assets"
)

// flatcarOSRelease is /etc/os-release as a Flatcar host has it, at version.
func flatcarOSRelease(version string) string {
	return `NAME="Flatcar Container Linux by Kinvolk"
ID=flatcar
ID_LIKE=coreos
VERSION=` + version + `
VERSION_ID=` + version + `
BUILD_ID=2026-10-14-0911
SYSEXT_LEVEL=1.0
PRETTY_NAME="Flatcar Container Linux by Kinvolk ` + version + ` (Oklo)"
ANSI_COLOR="38;5;75"
HOME_URL="https://flatcar.org/"
FLATCAR_BOARD="amd64-usr"
`
}

func TestCheckOSRelease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, osRelease string
		want            string // "" for no error
	}{
		{"the oldest supported", flatcarOSRelease(assets.MinFlatcar), ""},
		{"a newer major", flatcarOSRelease("4593.0.0"), ""},
		{"a newer patch", flatcarOSRelease(strings.TrimSuffix(assets.MinFlatcar, "0") + "7"), ""},
		{"an older release", flatcarOSRelease("4081.2.1"),
			"unsupported host: the host runs Flatcar 4081.2.1; OPKE needs Flatcar " + assets.MinFlatcar + " or later (containerd 2): use a newer image"},
		{"another OS", "PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"13\"\nID=debian\n",
			`unsupported host: the host runs "Debian GNU/Linux 13 (trixie)", not Flatcar Container Linux (` + assets.MinFlatcar + ` or later): its image is not one OPKE renders for`},
		{"no os-release", "", `unsupported host: the host runs "", not Flatcar Container Linux (` + assets.MinFlatcar + ` or later): its image is not one OPKE renders for`},
		{"a release that is not a number", "ID=flatcar\nVERSION_ID=\"current\"\n",
			`unsupported host: the host's Flatcar release "current": not MAJOR.MINOR.PATCH`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := assets.CheckOSRelease([]byte(tc.osRelease))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want || !errors.Is(err, assets.ErrUnsupportedHost)):
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestParseOSRelease(t *testing.T) {
	t.Parallel()
	got := assets.ParseOSRelease([]byte("# comment\n\nID='flatcar'\nVERSION_ID=4459.2.0\nPRETTY_NAME=\"A \\\"quoted\\\" \\$name\"\nNOT A LINE\n"))
	want := assets.OSRelease{ID: "flatcar", VersionID: "4459.2.0", PrettyName: `A "quoted" $name`}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// FuzzParseOSRelease: any bytes parse without a panic, and a check of
// them either passes or says why.
func FuzzParseOSRelease(f *testing.F) {
	f.Add([]byte(flatcarOSRelease(assets.MinFlatcar)))
	f.Add([]byte("ID=\"\nVERSION_ID='1.2.3"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = assets.ParseOSRelease(b)
		if err := assets.CheckOSRelease(b); err != nil && !errors.Is(err, assets.ErrUnsupportedHost) {
			t.Errorf("an error that is not ErrUnsupportedHost: %v", err)
		}
	})
}
