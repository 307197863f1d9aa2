package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/testutil/agenttest"
	"github.com/krunbox/krunbox/internal/testutil/testkrun"
	"github.com/krunbox/krunbox/krun"
)

// doctorEnv gives doctor a working machine: the test double, a stand-in KVM
// device, the agent built by TestMain and a fresh state directory.
func doctorEnv(t *testing.T) {
	t.Helper()
	if err := vmm.CheckNamespaces(); err != nil {
		t.Skipf("the libkrun test double, which doctor's boot check starts, needs namespaces: %v", err)
	}
	dir := t.TempDir()
	kvm := filepath.Join(dir, "kvm")
	if err := os.WriteFile(kvm, []byte("stand-in"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(krun.LibraryEnv, testkrun.Library(t))
	t.Setenv(vmm.KVMDeviceEnv, kvm)
	t.Setenv("KRUNBOX_AGENT", agenttest.Binary())
	t.Setenv("KRUNBOX_HOME", filepath.Join(dir, "home"))
}

func TestDoctorAllGood(t *testing.T) {
	doctorEnv(t)
	code, out, errOut := runCLI(t, "doctor")
	if code != 0 || strings.Contains(out, "✗") {
		t.Fatalf("doctor: code %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"✓ platform", "✓ hypervisor", "✓ libkrun: ", "test double", "✓ live workspace: ", "✓ libkrun context", "✓ state directory", "✓ guest agent", "✓ boot: a VM boots and answers in "} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
}

func TestDoctorReportsProblemsWithFixes(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		args  []string
		want  []string
		fatal bool
	}{
		// --quick: KRUNBOX_KVM_DEVICE makes the runner check the device
		// even under the double, so a VM could not boot.
		{"no KVM under the test double", map[string]string{vmm.KVMDeviceEnv: "/nonexistent/kvm"}, []string{"--quick"},
			[]string{"✗ hypervisor: cannot use KVM", "not needed by the test double", "fix: no /nonexistent/kvm"}, false},
		{"missing libkrun", map[string]string{krun.LibraryEnv: "/nonexistent/libkrun.so.1"}, nil,
			// The fix says where to get libkrun on this platform.
			[]string{"✗ libkrun: load libkrun: /nonexistent/libkrun.so.1", "fix: install libkrun", krun.InstallHint(), "- boot: not tried"}, true},
		{"no agent", map[string]string{"KRUNBOX_AGENT": "/nonexistent/agent"}, nil,
			[]string{"✗ guest agent: KRUNBOX_AGENT"}, true},
		{"unwritable state", map[string]string{"KRUNBOX_HOME": "/proc/krunbox"}, nil,
			[]string{"✗ state directory", "fix: make /proc/krunbox/state writable"}, true},
		// An upstream libkrun: VMs start, the workspace may be stale.
		{"upstream libkrun", map[string]string{krun.LibraryEnv: testkrun.Build(t, "-DTESTKRUN_STOCK")}, []string{"--quick"},
			[]string{"✗ live workspace: this libkrun (", "lacks krun_set_virtiofs_cache", "up to 5s stale", "(optional)",
				"fix: krunbox's libkrun adds krun_set_virtiofs_cache"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doctorEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			code, out, _ := runCLI(t, append([]string{"doctor"}, tt.args...)...)
			if (code != 0) != tt.fatal {
				t.Errorf("exit code %d, want failure %v", code, tt.fatal)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// doctor boots a VM: on a /dev/kvm that opens but cannot run the guest
// (TESTKRUN_NO_BOOT, what libkrun does on PVM) it says ✗ with what was
// seen, the likely cause this host shows and a fix, within --boot-timeout;
// --quick skips the boot.
func TestDoctorBootCheck(t *testing.T) {
	cause := vmm.DescribeKVM().LikelyCause()
	tests := []struct {
		name, noBoot string
		args         []string
		want, not    []string
		fatal        bool
	}{
		{"dies silently", "exit", nil,
			[]string{"✗ boot: the VM ended (exit code 1) after ", "nothing on its console", "ERROR krun_vmm::linux::vstate] Received KVM_EXIT_INTERNAL_ERROR signal", "    fix: "},
			nil, true},
		{"never answers", "hang", []string{"--boot-timeout", "2s"},
			[]string{"✗ boot: no answer from the guest agent within 2s; the VM was stopped", "libkrun logged nothing", "    fix: "},
			nil, true},
		{"quick", "hang", []string{"--quick"}, []string{"✓ guest agent"}, []string{"boot"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doctorEnv(t)
			t.Setenv("TESTKRUN_NO_BOOT", tt.noBoot)
			begin := time.Now()
			code, out, errOut := runCLI(t, append([]string{"doctor"}, tt.args...)...)
			if (code != 0) != tt.fatal {
				t.Errorf("exit code %d, want failure %v:\n%s%s", code, tt.fatal, out, errOut)
			}
			if took := time.Since(begin); took > 20*time.Second {
				t.Errorf("doctor took %v", took)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
			if tt.fatal && cause != "" && !strings.Contains(out, "    likely cause: "+cause+"\n") {
				t.Errorf("output lacks the likely cause on this host (%s):\n%s", cause, out)
			}
		})
	}
}

// With a libkrun that is not the test double (the double built without its
// marker), doctor needs libkrunfw and says which file it loaded and its ABI
// version, or why it could not.
func TestDoctorLibkrunfw(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the stand-in libkrunfw is found through LD_LIBRARY_PATH")
	}
	libkrun := testkrun.Build(t, "-DTESTKRUN_UNMARKED")
	// krunbox's libkrunfw: its kernel has /proc/fs/fsnotify_inject.
	krunfw := testkrun.Krunfw(t, `int krunfw_get_version(void) { return 4; }
		__attribute__((used)) const char kernel[] = "/proc/fs/fsnotify_inject";`)
	stock := testkrun.Krunfw(t, "int krunfw_get_version(void) { return 5; }")
	odd := testkrun.Krunfw(t, "int krunfw_get_kernel(void) { return 0; }")
	none := t.TempDir()
	tests := []struct {
		name, lib, krunfwDir string
		want                 []string
		fatal, warn          bool
	}{
		{"found", libkrun, filepath.Dir(krunfw),
			[]string{"✓ libkrun: " + libkrun + " (" + krun.WhyEnv + ")", "✓ libkrunfw: " + krunfw + ", ABI version 4 (" + krun.WhySystem + ")", "✓ libkrun context",
				"✓ file events: host edits to the workspace and -v mounts wake the guest's file watchers"}, false, false},
		{"stock", libkrun, filepath.Dir(stock),
			[]string{"✓ libkrunfw: " + stock + ", ABI version 5", "✗ file events: the guest kernel in " + stock + " has no fsnotify injection", "fix: krunbox's libkrunfw"}, false, true},
		{"missing", libkrun, none,
			[]string{"✗ libkrunfw: load libkrunfw: " + testkrun.KrunfwName + ": cannot open shared object file", "fix: install libkrunfw"}, true, false},
		{"no krunfw_get_version", libkrun, filepath.Dir(odd),
			[]string{"✗ libkrunfw: load libkrunfw: " + testkrun.KrunfwName + ": no krunfw_get_version", "fix: install libkrunfw"}, true, false},
		{"not needed by the test double", testkrun.Library(t), none,
			[]string{"✓ libkrunfw: not found, and not needed by the test double", "✓ file events: the test double records"}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.krunfwDir == none {
				if f, _, err := krun.KrunfwVersion(); err == nil {
					t.Skipf("this host has a libkrunfw (%s)", f)
				}
			}
			doctorEnv(t)
			t.Setenv(krun.LibraryEnv, tt.lib)
			t.Setenv("LD_LIBRARY_PATH", tt.krunfwDir) // for doctor's probe process
			code, out, _ := runCLI(t, "doctor")
			if (code != 0) != tt.fatal || strings.Contains(out, "✗") != (tt.fatal || tt.warn) {
				t.Errorf("exit code %d, want failure %v, a warning %v:\n%s", code, tt.fatal, tt.warn, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if double := strings.Contains(out, "test double"); double != (tt.lib != libkrun) {
				t.Errorf("doctor took %s for the test double: %v\n%s", tt.lib, double, out)
			}
		})
	}
}

// Where the runner cannot mount an overlay root (here: overlayfs cannot
// take a ':' in the state directory's path), doctor says that sandboxes
// will use a copied root, and how to enable the fast path, but krunbox
// still works: the line is not fatal.
func TestDoctorWithoutOverlayRoots(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("overlay roots are Linux's")
	}
	doctorEnv(t)
	if code, out, _ := runCLI(t, "doctor"); code != 0 || !strings.Contains(out, "✓ namespaces: ") || !strings.Contains(out, "copies nothing") {
		t.Fatalf("doctor where overlays work: code %d\n%s", code, out)
	}
	t.Setenv("KRUNBOX_HOME", filepath.Join(t.TempDir(), "a:b"))
	code, out, _ := runCLI(t, "doctor")
	if code != 0 {
		t.Errorf("exit code %d: a copied root is slower, not fatal", code)
	}
	for _, want := range []string{"✗ namespaces: ", "cannot mount an overlay root", "sandboxes will use a copied root (slower to create, more disk) (optional)", "fix: "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// A library that aborts the process must not take doctor down.
func TestDoctorSurvivesACrashingLibrary(t *testing.T) {
	doctorEnv(t)
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv(krun.LibraryEnv, testkrun.AbortingLibrary(t))
	code, out, _ := runCLI(t, "doctor")
	if code != 1 || !strings.Contains(out, "✗ libkrun: probe libkrun") || !strings.Contains(out, "SIGABRT") || !strings.Contains(out, "✓ state directory") {
		t.Fatalf("doctor with an aborting library: code %d\n%s", code, out)
	}
}

// The built krunbox is its own VM runner: doctor's probe re-executes it.
func TestBuiltKrunboxProbesInItself(t *testing.T) {
	bin := os.Getenv("KRUNBOX_BIN")
	if bin == "" {
		t.Skip("KRUNBOX_BIN not set (make test sets it to build/krunbox)")
	}
	doctorEnv(t)
	out, err := exec.Command(bin, "doctor").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "✓ libkrun context") || !strings.Contains(string(out), "test double") {
		t.Fatalf("%s doctor: %v\n%s", bin, err, out)
	}
}
