//go:build linux

package guestagent

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseTopMounts(t *testing.T) {
	const mountinfo = `22 1 0:20 / / rw,relatime - virtiofs /dev/root rw
23 22 0:21 / /proc rw,nosuid - proc proc rw
24 22 0:22 / /sys rw - sysfs sysfs rw
25 24 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw
26 22 0:5 / /dev rw - devtmpfs devtmpfs rw
27 26 0:24 / /dev/pts rw - devpts devpts rw
28 22 0:25 / /my\040dir rw - tmpfs tmpfs rw
29 22 0:26 / /proc rw - tmpfs again rw
short line
`
	got, err := parseTopMounts(strings.NewReader(mountinfo))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/proc", "/sys", "/dev", "/my dir"}; !reflect.DeepEqual(got, want) {
		t.Errorf("parseTopMounts = %q, want %q", got, want)
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`:    "/a b",
		`/tab\011x`:  "/tab\tx",
		`/back\134s`: `/back\s`,
		`/plain`:     "/plain",
		`/short\04`:  `/short\04`,
		`/not\999`:   `/not\999`,
	} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}
