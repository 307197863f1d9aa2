//go:build linux

package vmm

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/testutil/poll"
)

func TestCheckOverlay(t *testing.T) {
	requireNamespaces(t)
	dir := t.TempDir()
	if err := CheckOverlay(dir); err != nil {
		t.Fatalf("overlay check where the runner can mount one: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the check left %d entries in %s", len(entries), dir)
	}
	// overlayfs cannot take a ':' in a layer's path: the mount fails,
	// and the check says so.
	odd := filepath.Join(t.TempDir(), "a:b")
	if err := os.Mkdir(odd, 0o755); err != nil {
		t.Fatal(err)
	}
	err := CheckOverlay(odd)
	if err == nil || !strings.Contains(err.Error(), "mount overlay") {
		t.Errorf("overlay check with a ':' in the path: %v, want the mount's failure", err)
	}
	if err := CheckOverlay(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("overlay check in a missing directory passed")
	}
}

// A plain-directory root runs in the runner's namespaces where the host
// allows them, and without them where it does not: the VM still starts,
// the runner stays in the caller's mount namespace (so it must not touch
// its mounts) and its log says why.
func TestPlainRootWithoutNamespaces(t *testing.T) {
	for _, tt := range []struct {
		name       string
		unavail    error
		namespaces bool
	}{
		{"namespaces available", nil, true},
		{"namespaces denied", errors.New("simulated: user namespaces are restricted"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			skipIfReal(t)
			saved := checkNamespaces
			checkNamespaces = func() error { return tt.unavail }
			t.Cleanup(func() { checkNamespaces = saved })
			mountsBefore := rootPropagation(t)

			spec, dir := shellSpec(t, `echo up; sleep 60`)
			v := startVM(t, dir, spec)
			poll.Until(t, "the guest", 20*time.Second, func() bool {
				b, _ := os.ReadFile(spec.ConsoleLog)
				return string(b) == "up\n"
			})
			ri, err := v.Runner()
			if err != nil {
				t.Fatal(err)
			}
			same := sameNamespace(t, ri.Pid, "mnt")
			if same == tt.namespaces {
				t.Errorf("runner in the caller's mount namespace: %v, want %v", same, !tt.namespaces)
			}
			logged := strings.Contains(readFile(t, filepath.Join(dir, LogFile)), "running without namespaces")
			if logged == tt.namespaces {
				t.Errorf("runner log says it runs without namespaces: %v, want %v", logged, !tt.namespaces)
			}
			if got := rootPropagation(t); got != mountsBefore {
				t.Errorf("the host's / changed propagation: %q, was %q", got, mountsBefore)
			}
		})
	}
}

// sameNamespace reports whether process pid is in this process's namespace
// of kind ("mnt", "user"...).
func sameNamespace(t *testing.T, pid int, kind string) bool {
	t.Helper()
	mine, err := os.Readlink("/proc/self/ns/" + kind)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/" + kind)
	if err != nil {
		t.Fatal(err)
	}
	return mine == theirs
}

// rootPropagation returns the optional fields (shared:N, master:N...) of
// this mount namespace's "/" in /proc/self/mountinfo. A runner that made
// the caller's mounts private would change them where "/" is shared, as
// systemd makes it.
func rootPropagation(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 6 && f[4] == "/" {
			opt, _, _ := strings.Cut(strings.Join(f[6:], " "), " - ")
			return opt
		}
	}
	t.Fatal("no / in /proc/self/mountinfo")
	return ""
}
