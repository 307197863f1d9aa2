package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A VM that dies before it is ready under run --rm: its logs go with the
// sandbox, so run prints their tails itself, libkrun's error included,
// and its hint does not send the user to 'krunbox logs' of a sandbox that
// is gone.
func TestRunRmShowsWhyTheVMDied(t *testing.T) {
	doctorEnv(t)
	ref := imageCLIEnv(t)
	home := os.Getenv("KRUNBOX_HOME")
	t.Setenv("TESTKRUN_NO_BOOT", "exit")
	code, _, errOut := runCLI(t, "run", "--rm", ref, "--", "true")
	if code != ExitKrunbox {
		t.Errorf("exit code %d, want %d", code, ExitKrunbox)
	}
	for _, w := range []string{
		"krunbox: the console of ",
		" is empty\n",
		"krunbox: the runner log (libkrun's warnings and errors) of ",
		"ends with:\n  | [",
		"ERROR krun_vmm::linux::vstate] Received KVM_EXIT_INTERNAL_ERROR signal\n",
		"hint: the sandbox is removed (--rm)",
	} {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errOut)
		}
	}
	if strings.Contains(errOut, "krunbox logs") {
		t.Errorf("stderr points at the logs of a removed sandbox:\n%s", errOut)
	}
	left, _ := os.ReadDir(filepath.Join(home, "state", "sandboxes"))
	for _, e := range left {
		t.Errorf("sandbox %s left behind", e.Name())
	}
}

// 'krunbox logs' prints the runner's log, with libkrun's error, on stderr.
func TestLogsShowTheRunnerLog(t *testing.T) {
	doctorEnv(t)
	ref := imageCLIEnv(t)
	t.Setenv("TESTKRUN_NO_BOOT", "exit")
	code, _, errOut := runCLI(t, "run", "--name", "kept", ref, "--", "true")
	if code != ExitKrunbox || !strings.Contains(errOut, "'krunbox logs kept'") {
		t.Fatalf("run of a VM that dies: exit %d, stderr %s", code, errOut)
	}
	t.Cleanup(func() { runCLI(t, "rm", "-f", "kept") })
	for _, args := range [][]string{{"logs", "kept"}, {"logs", "-f", "kept"}} {
		code, out, errOut := runCLI(t, args...)
		if code != 0 || out != "" || !strings.Contains(errOut, "ERROR krun_vmm::linux::vstate] Received KVM_EXIT_INTERNAL_ERROR signal") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want libkrun's error on stderr", args, code, out, errOut)
		}
	}
}

// Control characters of a hostile guest's console are made visible
// before they reach the user's terminal.
func TestVisible(t *testing.T) {
	for in, want := range map[string]string{
		"plain\ttext":           "plain\ttext",
		"\x1b]0;owned\x07x":     "\uFFFD]0;owned\uFFFDx",
		"cr\rline":              "cr\uFFFDline",
		"unicode é ok \u009b2J": "unicode é ok \uFFFD2J",
	} {
		if got := visible(in); got != want {
			t.Errorf("visible(%q) = %q, want %q", in, got, want)
		}
	}
}
