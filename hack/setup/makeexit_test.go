package setup

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestExitWith tests hack/makeexit (make run's exit code): it runs a
// makefile like the repository's (a goal whose job writes its command's
// status, then $(call exit-with,...)) and checks make's own exit status.
// hack/setup/quickstart.sh checks make run itself.
func TestExitWith(t *testing.T) {
	for _, tool := range []string{"make", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	if b, _ := exec.Command("make", "--version").Output(); !strings.HasPrefix(string(b), "GNU Make 4.") {
		t.Skipf("needs GNU make 4 (load): %q", b)
	}
	mk, err := filepath.Abs("../makeexit/makeexit.mk")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	makefile := "MAKEEXIT_SO := $(CURDIR)/out/makeexit.so\n" +
		"MAKEEXIT_GOALS := run\n" +
		"include " + mk + "\n" +
		"run: job\n\t$(call exit-with,$(CURDIR)/status)\n" +
		"job:\n\t@sh -c 'exit $(CODE)'; echo $$? >$(CURDIR)/status\n"
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte(makefile), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		code int
		cc   string // "": the default
		want int
		out  string
	}{
		{"krunbox's 125", 125, "", 125, ""},
		{"a command's own code", 7, "", 7, ""},
		{"success", 0, "", 0, ""},
		// Without the plugin, make says the code and exits with its own 2.
		{"no plugin", 125, "false", 2, "Error 125"},
		{"no plugin, success", 0, "false", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.RemoveAll(filepath.Join(dir, "out")); err != nil {
				t.Fatal(err)
			}
			args := []string{"--no-print-directory", "-C", dir, "run", "CODE=" + strconv.Itoa(tt.code)}
			if tt.cc != "" {
				args = append(args, "CC="+tt.cc)
			}
			cmd := exec.Command("make", args...)
			cmd.Env = append(os.Environ(), "MAKEFLAGS=")
			b, err := cmd.CombinedOutput()
			got := 0
			if ee, ok := err.(*exec.ExitError); ok {
				got = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || !strings.Contains(string(b), tt.out) {
				t.Errorf("make run with a command exiting %d: exit %d, %q; want %d and %q", tt.code, got, b, tt.want, tt.out)
			}
		})
	}
}
