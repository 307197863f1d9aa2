package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/testkrun"
)

// TestLoaderPathReachesKrunbox: a libkrun found only through
// LD_LIBRARY_PATH is found by the krunbox the suite runs, as by `krunbox
// doctor` run from the same shell (e2e/bundle/run.sh on such a host failed
// at once when the harness dropped the variable).
func TestLoaderPathReachesKrunbox(t *testing.T) {
	dir := t.TempDir()
	lib, err := os.ReadFile(testkrun.Library(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "libkrun.so.1"), lib, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LD_LIBRARY_PATH", dir)
	s := &suite{mode: real}
	res := s.doctor(t)
	if want := filepath.Join(dir, "libkrun.so.1"); !strings.Contains(res.stdout, "libkrun: "+want) {
		t.Errorf("krunbox did not load %s through LD_LIBRARY_PATH:\n%s", want, res)
	}
}

// TestSuiteCPUs: KRUNBOX_E2E_CPUS sets the vCPUs of the sandboxes the
// scenarios create.
func TestSuiteCPUs(t *testing.T) {
	if imageErr != nil {
		t.Skipf("no test image: %v", imageErr)
	}
	t.Setenv(cpusEnv, "1")
	e := newEnv(t, &suite{mode: double, lib: testkrun.Library(t)})
	e.pull()
	e.ok("create", "--name", "one", image)
	if c := e.inspect("one")["config"].(map[string]any); c["cpus"] != 1.0 {
		t.Errorf("cpus %v with %s=1, want 1", c["cpus"], cpusEnv)
	}
}
