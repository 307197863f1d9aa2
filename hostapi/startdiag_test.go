package hostapi

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/krunbox/krunbox/hostapi/vmm"
)

// A VM that dies before its agent answers says why in the start error:
// libkrun's own log is in the runner's log.
func TestStartShowsLibkrunLog(t *testing.T) {
	h, ref := testHost(t)
	sb, err := h.Create(t.Context(), Config{Name: "silent", Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Remove(context.Background()) })
	t.Setenv("TESTKRUN_NO_BOOT", "exit")
	err = sb.Start(t.Context())
	var de *DeadError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "Received KVM_EXIT_INTERNAL_ERROR signal") {
		t.Fatalf("start: %v; want a DeadError with libkrun's error", err)
	}
	if _, log := sb.Tails(4096); !strings.Contains(log, "ERROR krun_vmm::linux::vstate") {
		t.Errorf("runner log tail %q lacks libkrun's error", log)
	}
}

// A start whose VM does not reach its agent in time stops the VM and says
// so.
func TestStartTimeoutStopsTheVM(t *testing.T) {
	h, ref := testHost(t, WithStartTimeout(2*time.Second))
	sb, err := h.Create(t.Context(), Config{Name: "mute", Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Remove(context.Background()) })
	t.Setenv("TESTKRUN_NO_BOOT", "hang")
	err = sb.Start(t.Context())
	var nr *NotReadyError
	if !errors.As(err, &nr) || !nr.Stopped {
		t.Fatalf("start: %v; want a NotReadyError saying the VM was stopped", err)
	}
	for _, w := range []string{"did not answer within 2s", "its VM was stopped", "the console is empty"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if strings.Contains(nr.Hint(), "krunbox stop") {
		t.Errorf("hint %q asks to stop a stopped VM", nr.Hint())
	}
	if st, err := vmm.Open(sb.Dir()).State(); err != nil || st == vmm.StateRunning {
		t.Errorf("VM state %v, %v after the start gave up", st, err)
	}
}
