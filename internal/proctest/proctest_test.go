package proctest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPortRanges(t *testing.T) {
	tests := []struct {
		name   string
		lo, hi int
		want   [][2]int
	}{
		{"Linux's default", 32768, 60999, [][2]int{{10000, 32767}, {61000, 65535}}},
		{"the whole upper range", 1024, 65535, nil},
		{"from 1024", 1024, 60999, [][2]int{{61000, 65535}}},
		{"to the top", 40000, 65535, [][2]int{{10000, 39999}}},
		{"above the top", 12000, 70000, [][2]int{{10000, 11999}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, portRanges(tt.lo, tt.hi)); diff != "" {
				t.Errorf("portRanges(%d, %d) (-want +got):\n%s", tt.lo, tt.hi, diff)
			}
		})
	}
}

func TestPick(t *testing.T) {
	ranges := [][2]int{{10, 12}, {20, 21}}
	var got []int
	for i := range 5 {
		got = append(got, pick(ranges, i))
	}
	if diff := cmp.Diff([]int{10, 11, 12, 20, 21}, got); diff != "" {
		t.Errorf("pick (-want +got):\n%s", diff)
	}
}

// TestFreeAddrsOutsideTheEphemeralRange: no address is one the kernel
// could hand out to a connection.
func TestFreeAddrsOutsideTheEphemeralRange(t *testing.T) {
	lo, hi := ephemeralRange()
	for _, a := range FreeAddrs(t, 50) {
		if port := portOf(a); port >= lo && port <= hi {
			t.Errorf("%s is in the ephemeral range %d-%d", a, lo, hi)
		}
	}
}

// TestFreeAddrsReserved: an address handed out stays out of every other
// test's reach until its test ends, though nothing listens on it,
// in this process and in another.
func TestFreeAddrsReserved(t *testing.T) {
	var mine []string
	t.Run("holder", func(t *testing.T) {
		mine = FreeAddrs(t, 20)
		for _, a := range mine {
			if unlock, ok := reserve(portOf(a)); ok {
				unlock()
				t.Errorf("%s reserved again in the same process", a)
			}
		}
		// Another process asks for each of them.
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), reservedEnv+"="+strings.Join(mine, " "))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("another process: %v\n%s", err, out)
		}
	})
	// The holder ended: its ports are free to reserve again.
	for _, a := range mine {
		unlock, ok := reserve(portOf(a))
		if !ok {
			t.Errorf("%s still reserved after its test ended", a)
			continue
		}
		unlock()
	}
}

// reservedEnv, set to addresses, makes this test binary the other process
// of TestFreeAddrsReserved: it exits 1 if it can reserve any of them.
const reservedEnv = "OPKE_PROCTEST_RESERVED"

func TestMain(m *testing.M) {
	if v := os.Getenv(reservedEnv); v != "" {
		os.Exit(reserveElsewhere(strings.Fields(v)))
	}
	os.Exit(m.Run())
}

func reserveElsewhere(addrs []string) int {
	code := 0
	for _, a := range addrs {
		if unlock, ok := reserve(portOf(a)); ok {
			unlock()
			fmt.Printf("%s reserved by a second process while the first holds it\n", a)
			code = 1
		}
	}
	if _, err := os.Stat(filepath.Join(os.TempDir(), "opke-ports")); err != nil {
		fmt.Println(err)
		code = 1
	}
	return code
}

// portOf is the port of a host:port address.
func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	return port
}
