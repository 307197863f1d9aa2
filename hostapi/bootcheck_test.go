package hostapi

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The boot check on the test double: a VM that boots answers; one that
// dies silently or never answers (TESTKRUN_NO_BOOT, what libkrun does on a
// PVM /dev/kvm) gives a BootError saying what was seen, within the
// timeout, and leaves neither a VM nor files behind.
func TestCheckBoot(t *testing.T) {
	tests := []struct {
		name, noBoot string
		want         []string
		ended        bool
	}{
		{"boots", "", nil, false},
		{"dies silently", "exit", []string{"the VM ended (exit code 1)", "nothing on its console", "log: [", "ERROR krun_vmm::linux::vstate] Received KVM_EXIT_INTERNAL_ERROR signal"}, true},
		{"never answers", "hang", []string{"no answer from the guest agent within 2s; the VM was stopped", "nothing on its console", "libkrun logged nothing"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := testHost(t)
			t.Setenv("TESTKRUN_NO_BOOT", tt.noBoot)
			const timeout = 2 * time.Second
			begin := time.Now()
			r, err := h.CheckBoot(t.Context(), timeout)
			took := time.Since(begin)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("CheckBoot: %v", err)
				}
				if r.Ready <= 0 || r.Ready > took || r.Agent == nil || r.Agent.Version == 0 {
					t.Errorf("report %+v (took %v), want the agent's hello and a time", r, took)
				}
			} else {
				var be *BootError
				if !errors.As(err, &be) {
					t.Fatalf("CheckBoot: %v, want a *BootError", err)
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				if (be.Exit != nil) != tt.ended {
					t.Errorf("exit status %v, want one: %v", be.Exit, tt.ended)
				}
				if be.Hint() == "" {
					t.Error("no hint")
				}
				if !tt.ended && took > timeout+10*time.Second {
					t.Errorf("took %v with a timeout of %v", took, timeout)
				}
			}
			left, _ := filepath.Glob(filepath.Join(h.Dirs().State, bootCheckPrefix+"*"))
			if len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

// A boot check's directory left by a process killed during the check is
// removed by the next check once its VM has stopped, never while it runs.
func TestCheckBootRemovesLeftovers(t *testing.T) {
	h, _ := testHost(t)
	if err := os.MkdirAll(h.Dirs().State, 0o700); err != nil {
		t.Fatal(err)
	}
	stale, err := os.MkdirTemp(h.Dirs().State, bootCheckPrefix)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	fresh, err := os.MkdirTemp(h.Dirs().State, bootCheckPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.CheckBoot(t.Context(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale boot check directory kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a boot check directory just made (maybe by another process) was removed: %v", err)
	}
}
