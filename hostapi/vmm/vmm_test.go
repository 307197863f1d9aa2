//go:build linux

package vmm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/internal/testutil/poll"
	"github.com/krunbox/krunbox/internal/testutil/testkrun"
	"github.com/krunbox/krunbox/krun"
)

// helperEnv makes the test binary run a helper instead of the tests: a
// caller process that starts a VM and exits, for instance.
const helperEnv = "KRUNBOX_VMM_TEST_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(runHelper(h))
	}
	code := m.Run()
	if probeBin != "" {
		os.RemoveAll(filepath.Dir(probeBin))
	}
	os.Exit(code)
}

// runHelper starts the VM of the directory named by KRUNBOX_VMM_TEST_DIR
// (its spec already written) and reports the runner's pid on stdout.
func runHelper(name string) int {
	dir := os.Getenv("KRUNBOX_VMM_TEST_DIR")
	spec, err := ReadSpec(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	v, err := Start(context.Background(), dir, spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ri, err := v.Runner()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	fmt.Println(ri.Pid)
	if name == "start-and-wait" {
		es, err := v.Wait(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 4
		}
		fmt.Println(es.Code)
	}
	return 0
}

// requireNamespaces skips the test where the runner cannot get the mount
// (and, unprivileged, user) namespace it needs.
func requireNamespaces(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if err := exec.Command("unshare", "-Urm", "true").Run(); err != nil {
		t.Skipf("needs root or unprivileged user namespaces: %v", err)
	}
}

// shortDir returns a new directory with a short path, for unix sockets.
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "kbv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// shellSpec is a VM on a busybox root running script with /bin/sh.
func shellSpec(t testing.TB, script string) (*Spec, string) {
	t.Helper()
	requireNamespaces(t)
	lib := realLib
	if lib == "" {
		lib = testkrun.Library(t)
	}
	dir := shortDir(t)
	root := filepath.Join(dir, "root")
	testkrun.BusyboxRoot(t, root)
	return &Spec{
		Root:       Root{Dir: root},
		Exec:       Exec{Path: "/bin/sh", Args: []string{"-c", script}, Env: []string{"PATH=/bin"}},
		ConsoleLog: filepath.Join(dir, "console.log"),
		Library:    lib,
	}, filepath.Join(dir, "vm")
}

func startVM(t *testing.T, dir string, spec *Spec) *VM {
	t.Helper()
	v, err := Start(context.Background(), dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		v.Stop(ctx, time.Second)
	})
	return v
}

// vmDeadline bounds a wait for a VM to boot or end: 30 s on the test
// double, 2 minutes on real libkrun, whose VMs boot a kernel (nested ones,
// in hack/realvm, on an emulated CPU: a VM that ended in 14 s in one run
// took over 30 in another, and a guest kernel took 7 to 20 s to reach its
// init).
func vmDeadline() time.Duration {
	if realLib != "" {
		return 2 * time.Minute
	}
	return 30 * time.Second
}

// wait waits for v to end, at most vmDeadline.
func wait(t *testing.T, v *VM) *ExitStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), vmDeadline())
	defer cancel()
	es, err := v.Wait(ctx)
	if err != nil {
		t.Fatalf("wait: %v\nrunner log:\n%s", err, v.logTail())
	}
	return es
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// console returns what the guest wrote on the console of spec. Real
// libkrun's console is a terminal in the guest, which ends each line it
// writes with "\r\n" where the test double writes "\n": the lines are
// what count.
func console(t *testing.T, spec *Spec) string {
	t.Helper()
	return strings.ReplaceAll(readFile(t, spec.ConsoleLog), "\r\n", "\n")
}

func TestExitCodePropagation(t *testing.T) {
	tests := []struct {
		name    string
		script  string
		want    int
		console string
	}{
		{"zero", "echo fine", 0, "fine\n"},
		{"code", "echo out; echo err >&2; exit 42", 42, "out\nerr\n"},
		{"signal", "kill -KILL $$", 128 + 9, ""},
		{"not found", "", 127, "Couldn't execute '/bin/nope' inside the vm"},
		{"cannot exec", "", 126, "Couldn't execute '/etc/data' inside the vm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, dir := shellSpec(t, tt.script)
			switch tt.name {
			case "not found":
				spec.Exec = Exec{Path: "/bin/nope"}
			case "cannot exec":
				os.WriteFile(filepath.Join(spec.Root.Dir, "etc", "data"), []byte("not a program"), 0o644)
				spec.Exec = Exec{Path: "/etc/data"}
			}
			v := startVM(t, dir, spec)
			es := wait(t, v)
			if es.Code != tt.want || es.Signal != "" {
				t.Errorf("exit status %+v, want code %d", es, tt.want)
			}
			// The runner process, as its parent sees it, exits with the
			// VM's code too.
			select {
			case ps := <-v.monitor:
				if ps.ExitCode() != tt.want {
					t.Errorf("the runner process exited with %d, want the VM's %d", ps.ExitCode(), tt.want)
				}
			case <-time.After(10 * time.Second):
				t.Error("the runner process has not exited 10 s after the VM stopped")
			}
			if got := console(t, spec); !strings.Contains(got, tt.console) {
				t.Errorf("console log %q, want %q", got, tt.console)
			}
		})
	}
}

func TestGuestEnvironment(t *testing.T) {
	spec, dir := shellSpec(t, `echo id=$(id -u):$(id -g) host=$(hostname) pwd=$(pwd) nofile=$(ulimit -n) X=$X; env`)
	spec.Exec.Env = append(spec.Exec.Env, "X=a b", "HOSTNAME=sbx")
	spec.Workdir = "/tmp"
	spec.Rlimits = []Rlimit{{Resource: "nofile", Cur: 321, Max: 654}}
	es := wait(t, startVM(t, dir, spec))
	out := console(t, spec)
	if es.Code != 0 || !strings.Contains(out, "id=0:0 host=sbx pwd=/tmp nofile=321 X=a b") {
		t.Errorf("exit %v, console:\n%s", es, out)
	}
	want := []string{"HOME=/", "TERM=linux", "KRUN_INIT=/bin/sh", "KRUN_WORKDIR=/tmp"}
	if realLib == "" {
		want = append(want, "KRUNBOX_TESTKRUN_DIR=/dev/.testkrun")
	}
	for _, want := range want {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("guest environment lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "KRUNBOX_VMM") || strings.Contains(out, "GOPATH") {
		t.Errorf("host environment leaked into the guest:\n%s", out)
	}
}

// Neither the guest's init nor its program holds the runner's descriptors
// (the VM's lock among them): a guest outliving its runner would keep the
// VM "running".
func TestGuestHoldsNoHostDescriptors(t *testing.T) {
	skipIfReal(t) // a real guest cannot see the VMM's descriptors at all
	spec, dir := shellSpec(t, `echo init: $(ls /proc/1/fd); echo self: $(ls /proc/self/fd)`)
	wait(t, startVM(t, dir, spec))
	for _, line := range strings.Split(strings.TrimSpace(console(t, spec)), "\n") {
		who, fds, _ := strings.Cut(line, ": ")
		// stdio, plus the console log in init and the directory ls reads.
		if n := len(strings.Fields(fds)); n > 4 {
			t.Errorf("%s holds %d descriptors: %s", who, n, fds)
		}
	}
}

func TestNetworkNone(t *testing.T) {
	// Each interface and its operational state.
	script := `for i in /sys/class/net/*; do echo ${i##*/} $(cat $i/operstate); done`
	for _, tt := range []struct {
		net     Network
		hostNet bool
	}{{NetworkNone, false}, {NetworkTSI, true}} {
		t.Run(string(tt.net), func(t *testing.T) {
			spec, dir := shellSpec(t, script)
			spec.Network = tt.net
			wait(t, startVM(t, dir, spec))
			state := map[string]string{}
			var ifaces []string
			for line := range strings.Lines(console(t, spec)) {
				if f := strings.Fields(line); len(f) == 2 {
					state[f[0]] = f[1]
					ifaces = append(ifaces, f[0])
				}
			}
			host, _ := net.Interfaces()
			switch {
			case tt.hostNet && realLib != "":
				// libkrun's init brings up dummy0 for TSI.
				if _, ok := state["dummy0"]; !ok {
					t.Errorf("TSI: guest sees %q, want dummy0", ifaces)
				}
			case tt.hostNet && len(ifaces) != len(host):
				t.Errorf("TSI: guest sees %q, want the host's %d interfaces (the double shares the host's network)", ifaces, len(host))
			}
			if tt.hostNet {
				return
			}
			// None: nothing but lo may be up. libkrunfw's kernel makes a
			// dummy0 of its own, which libkrun's init leaves down without
			// TSI; the double has lo alone.
			if _, ok := state["lo"]; !ok {
				t.Errorf("network none: guest sees %q, want lo", ifaces)
			}
			for name, st := range state {
				switch {
				case name == "lo":
				case realLib != "" && name == "dummy0" && st == "down":
				default:
					t.Errorf("network none: guest has %s (%s); want only lo, and on real libkrun dummy0 down", name, st)
				}
			}
		})
	}
}

func TestConsoleLogAndRunnerLog(t *testing.T) {
	spec, dir := shellSpec(t, "echo to-console")
	spec.LogLevel = 3
	v := startVM(t, dir, spec)
	wait(t, v)
	if got := console(t, spec); got != "to-console\n" {
		t.Errorf("console log %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, LogFile)); err != nil {
		t.Errorf("no runner log: %v", err)
	}
}

func TestNoKVMIsAClearError(t *testing.T) {
	spec, dir := shellSpec(t, "echo should-not-run")
	t.Setenv(KVMDeviceEnv, "/nonexistent/kvm")
	_, err := Start(context.Background(), dir, spec)
	var se *StartError
	if !errors.As(err, &se) {
		t.Fatalf("Start without KVM: %v, want a StartError", err)
	}
	if se.Status.Code != ExitRunnerFailed || se.Status.Signal != "" {
		t.Errorf("runner ended with %v, want code %d (not an abort)", se.Status, ExitRunnerFailed)
	}
	if !strings.Contains(se.Log, "cannot use KVM") || !strings.Contains(se.Log, "/nonexistent/kvm") {
		t.Errorf("runner log %q does not say KVM is missing", se.Log)
	}
	if out, _ := os.ReadFile(spec.ConsoleLog); strings.Contains(string(out), "should-not-run") {
		t.Error("the workload ran without KVM")
	}
}

func TestMissingLibraryIsAClearError(t *testing.T) {
	spec, dir := shellSpec(t, "true")
	spec.Library = "/nonexistent/libkrun.so.1"
	_, err := Start(context.Background(), dir, spec)
	var se *StartError
	if !errors.As(err, &se) || se.Status.Code != ExitRunnerFailed || !strings.Contains(se.Log, "load libkrun") {
		t.Fatalf("Start with a missing library: %v", err)
	}
}

func TestLibraryRefusalIsAClearError(t *testing.T) {
	skipIfReal(t)
	spec, dir := shellSpec(t, "true")
	spec.Network = NetworkNone
	spec.Library = testkrun.Build(t, "-DTESTKRUN_LEGACY")
	_, err := Start(context.Background(), dir, spec)
	var se *StartError
	if !errors.As(err, &se) || !strings.Contains(se.Log, "krun_disable_implicit_vsock") || !strings.Contains(se.Log, "needs libkrun 1.17") {
		t.Fatalf("network none on a pre-1.17 library: %v", err)
	}
}

func TestStartRefusesARunningVM(t *testing.T) {
	spec, dir := shellSpec(t, "while [ ! -e /stop ]; do sleep 0.01; done")
	v := startVM(t, dir, spec)
	if _, err := Start(context.Background(), dir, spec); !errors.Is(err, ErrRunning) {
		t.Errorf("second Start: %v, want ErrRunning", err)
	}
	os.WriteFile(filepath.Join(spec.Root.Dir, "stop"), nil, 0o644)
	if es := wait(t, v); es.Code != 0 {
		t.Errorf("exit %v", es)
	}
}

// The caller is a separate process that starts the VM and exits; the VM
// must keep running, in its own session.
func TestDetachedFromCaller(t *testing.T) {
	spec, dir := shellSpec(t, "while [ ! -e /stop ]; do sleep 0.01; done; echo stopped")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteSpec(dir, spec); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=start", "KRUNBOX_VMM_TEST_DIR="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("caller: %v\n%s", err, out)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	v := Open(dir)
	t.Cleanup(func() { v.Stop(context.Background(), time.Second) })
	// The caller has exited (Output waited for it); the VM runs on.
	if st, err := v.State(); st != StateRunning {
		t.Fatalf("after the caller exited: state %v, %v", st, err)
	}
	ri, err := v.Runner()
	if err != nil || ri.Pid != pid {
		t.Fatalf("runner %+v, %v; the caller saw pid %d", ri, err, pid)
	}
	sid, _ := unix.Getsid(ri.Pid)
	if mine, _ := unix.Getsid(0); sid == mine {
		t.Errorf("runner shares the caller's session %d", sid)
	}
	os.WriteFile(filepath.Join(spec.Root.Dir, "stop"), nil, 0o644)
	if es := wait(t, v); es.Code != 0 || console(t, spec) != "stopped\n" {
		t.Errorf("exit %v, console %q", es, console(t, spec))
	}
}

func TestDeadRunnerIsStoppedNotHung(t *testing.T) {
	spec, dir := shellSpec(t, "while :; do sleep 1; done")
	v := startVM(t, dir, spec)
	ri, err := v.Runner()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(ri.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	es := wait(t, v)
	if es.Signal != "SIGKILL" || es.Code != 137 {
		t.Errorf("exit status %+v, want the runner killed by SIGKILL", es)
	}
	if st, _ := v.State(); st != StateStopped {
		t.Errorf("state %v, want stopped", st)
	}
	if _, err := v.Runner(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Runner() of a dead VM: %v", err)
	}
	if err := v.Signal(syscall.SIGTERM); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Signal to a dead VM: %v", err)
	}
}

func TestMonitorAndRunnerKilled(t *testing.T) {
	spec, dir := shellSpec(t, "while :; do sleep 1; done")
	v := startVM(t, dir, spec)
	ri, err := v.Runner()
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(ri.Monitor, syscall.SIGKILL)
	// With the monitor gone, the runner alone holds the lock.
	poll.Until(t, "the monitor to die", 20*time.Second, func() bool { return syscall.Kill(ri.Monitor, 0) != nil || isZombie(ri.Monitor) })
	if st, _ := v.State(); st != StateRunning {
		t.Fatalf("runner alive without its monitor: state %v", st)
	}
	syscall.Kill(ri.Pid, syscall.SIGKILL)
	poll.Until(t, "the VM to be seen stopped", 20*time.Second, func() bool { st, _ := v.State(); return st == StateStopped })
	if _, err := v.ExitStatus(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("exit status without a monitor: %v, want unknown", err)
	}
}

func isZombie(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(data), ')')
	return i > 0 && strings.HasPrefix(string(data[i+1:]), " Z")
}

func TestStalePidFileIsNotALiveVM(t *testing.T) {
	dir := t.TempDir()
	v := Open(dir)
	if st, _ := v.State(); st != StateNone {
		t.Fatalf("empty directory: state %v", st)
	}
	// A pid file naming a live process (this one) and a lock nobody holds.
	st, _ := processStartTime(os.Getpid())
	os.WriteFile(filepath.Join(dir, PidFile), fmt.Appendf(nil, `{"pid":%d,"start_time":%d}`, os.Getpid(), st), 0o600)
	os.WriteFile(filepath.Join(dir, LockFile), nil, 0o600)
	if st, _ := v.State(); st != StateStopped {
		t.Errorf("state %v, want stopped", st)
	}
	if _, err := v.Runner(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Runner() = %v, want ErrNotRunning", err)
	}
	// A held lock but a pid file from another process life.
	f, _ := os.Open(filepath.Join(dir, LockFile))
	defer f.Close()
	unix.Flock(int(f.Fd()), unix.LOCK_EX)
	os.WriteFile(filepath.Join(dir, PidFile), fmt.Appendf(nil, `{"pid":%d,"start_time":%d}`, os.Getpid(), st+1), 0o600)
	if _, err := v.Runner(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Runner() with a reused pid = %v, want ErrNotRunning", err)
	}
}

// ignoreSIGTERMEnv makes a runner started from this test binary ignore
// SIGTERM, as a VMM stuck or deaf to it would. It takes effect as the
// package's variables are initialised (ignoreSIGTERM), which happens before
// any init function, so before runner.go's init turns the process into the
// runner.
const ignoreSIGTERMEnv = "KRUNBOX_VMM_TEST_IGNORE_SIGTERM"

var _ = ignoreSIGTERM()

func ignoreSIGTERM() bool {
	if os.Getenv(ignoreSIGTERMEnv) == "" {
		return false
	}
	signal.Ignore(syscall.SIGTERM)
	return true
}

func TestStop(t *testing.T) {
	const grace = time.Second
	for _, tt := range []struct {
		name       string
		ignoreTERM bool
		want       string // the signal that ended the runner
	}{
		{"SIGTERM ends the runner", false, "SIGTERM"},
		{"SIGKILL after the grace when SIGTERM is ignored", true, "SIGKILL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.ignoreTERM {
				t.Setenv(ignoreSIGTERMEnv, "1")
			}
			spec, dir := shellSpec(t, "while :; do sleep 1; done")
			v := startVM(t, dir, spec)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			start := time.Now()
			es, err := v.Stop(ctx, grace)
			took := time.Since(start)
			if err != nil || es.Signal != tt.want || es.Code != 128+int(unix.SignalNum(tt.want)) {
				t.Fatalf("Stop: %+v, %v; want the runner ended by %s", es, err, tt.want)
			}
			if tt.ignoreTERM && took < grace {
				t.Errorf("SIGKILL %v after SIGTERM, before the grace of %v ended", took, grace)
			}
			if st, err := v.State(); err != nil || st != StateStopped {
				t.Errorf("state after Stop: %v, %v; want stopped", st, err)
			}
		})
	}
}

func TestOverlayRootLeavesImageUntouched(t *testing.T) {
	spec, dir := shellSpec(t, `echo changed > /etc/motd; echo new > /etc/new; rm /etc/gone; cat /etc/motd /etc/new; stat -c %u:%g /etc/motd`)
	image := spec.Root.Dir
	os.WriteFile(filepath.Join(image, "etc", "motd"), []byte("original\n"), 0o644)
	os.WriteFile(filepath.Join(image, "etc", "gone"), []byte("x"), 0o644)
	state := filepath.Dir(spec.ConsoleLog)
	spec.Root = Root{Lower: image, Upper: filepath.Join(state, "upper"), Work: filepath.Join(state, "work"), Merged: filepath.Join(state, "merged")}

	if es := wait(t, startVM(t, dir, spec)); es.Code != 0 {
		t.Fatalf("exit %v: %s", es, console(t, spec))
	}
	if got := console(t, spec); got != "changed\nnew\n0:0\n" {
		t.Errorf("guest saw %q", got)
	}
	if got := readFile(t, filepath.Join(image, "etc", "motd")); got != "original\n" {
		t.Errorf("image changed: motd %q", got)
	}
	if _, err := os.Stat(filepath.Join(image, "etc", "gone")); err != nil {
		t.Errorf("image changed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(image, "etc", "new")); err == nil {
		t.Error("image changed: /etc/new written into it")
	}
	if got := readFile(t, filepath.Join(spec.Root.Upper, "etc", "new")); got != "new\n" {
		t.Errorf("upper layer: %q", got)
	}
	if entries, _ := os.ReadDir(spec.Root.Merged); len(entries) != 0 {
		t.Errorf("overlay leaked into the host mount namespace: %d entries in merged", len(entries))
	}

	// The writable layer persists across runs.
	spec.Exec.Args = []string{"-c", "cat /etc/new; test -e /etc/gone || echo gone"}
	if es := wait(t, startVM(t, dir, spec)); es.Code != 0 {
		t.Fatalf("second run: %v", es)
	}
	if got := console(t, spec); got != "new\ngone\n" {
		t.Errorf("second run saw %q", got)
	}
}

// An unprivileged caller: the runner maps it to root in a user namespace
// and mounts the overlay there; the guest sees the caller's files as
// root's and cannot write to the image.
func TestUnprivilegedOverlay(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to an unprivileged user (nobody)")
	}
	const nobody = 65534
	if realLib != "" {
		// A real VM needs /dev/kvm: usable by everyone here, as on distributions
		// that let users run VMs (l1-run.sh makes L1's so).
		if fi, err := os.Stat("/dev/kvm"); err != nil || fi.Mode().Perm()&0o006 != 0o006 {
			t.Skip("/dev/kvm is not usable by nobody (read and write for all): the unprivileged runner cannot start a real VM")
		}
	}
	spec, dir := shellSpec(t, `id -u; stat -c %u /etc/motd; echo w > /etc/motd && cat /etc/motd`)
	base := filepath.Dir(spec.ConsoleLog)
	image := spec.Root.Dir
	os.WriteFile(filepath.Join(image, "etc", "motd"), []byte("original\n"), 0o644)
	spec.Root = Root{Lower: image, Upper: filepath.Join(base, "upper"), Work: filepath.Join(base, "work"), Merged: filepath.Join(base, "merged")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteSpec(dir, spec); err != nil {
		t.Fatal(err)
	}
	// The test binary and library must be reachable by nobody.
	exe := filepath.Join(base, "vmm.test")
	data, _ := os.ReadFile(os.Args[0])
	os.WriteFile(exe, data, 0o755)
	lib := filepath.Join(base, "libkrun.so.1")
	if data, err := os.ReadFile(spec.Library); err == nil {
		os.WriteFile(lib, data, 0o755)
		spec.Library = lib
	}
	WriteSpec(dir, spec)
	filepath.Walk(base, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, nobody, nobody) })
	os.Chmod(base, 0o755)

	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=start-and-wait", "KRUNBOX_VMM_TEST_DIR="+dir, testkrun.LibraryEnv+"="+lib)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unprivileged caller: %v\n%s\nrunner log:\n%s", err, out, Open(dir).logTail())
	}
	if got := console(t, spec); got != "0\n0\nw\n" {
		t.Errorf("console %q, want %q: uid 0, image files owned by 0, writes allowed", got, "0\n0\nw\n")
	}
	if got := readFile(t, filepath.Join(image, "etc", "motd")); got != "original\n" {
		t.Errorf("image changed: %q", got)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(spec.Root.Upper, "etc", "motd"), &st); err != nil || st.Uid != nobody {
		t.Errorf("upper file: %v, owner %d, want the caller's uid %d", err, st.Uid, nobody)
	}
}

// vsockProbe builds testdata/vsockprobe, a static Go program using
// guestagent/vmdev, into the root's /bin.
func vsockProbe(t testing.TB, root string) {
	t.Helper()
	if p := os.Getenv("KRUNBOX_TEST_VSOCKPROBE"); p != "" {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(root, "bin", "vsockprobe"), data, 0o755)
		return
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go to build testdata/vsockprobe: set KRUNBOX_TEST_VSOCKPROBE to a prebuilt one")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kbprobe")
		if err != nil {
			buildErr = err
			return
		}
		probeBin = filepath.Join(dir, "vsockprobe")
		cmd := exec.Command("go", "build", "-o", probeBin, "./testdata/vsockprobe")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build vsockprobe: %v", buildErr)
	}
	data, _ := os.ReadFile(probeBin)
	if err := os.WriteFile(filepath.Join(root, "bin", "vsockprobe"), data, 0o755); err != nil {
		t.Fatal(err)
	}
}

var (
	buildOnce sync.Once
	probeBin  string
	buildErr  error
)

func TestVsockGuestListens(t *testing.T) {
	for _, network := range []Network{NetworkTSI, NetworkNone} {
		t.Run(string(network), func(t *testing.T) {
			spec, dir := shellSpec(t, "")
			vsockProbe(t, spec.Root.Dir)
			sock := filepath.Join(filepath.Dir(spec.ConsoleLog), "agent.sock")
			if network == NetworkNone {
				// A path longer than sun_path, where libkrun must listen.
				long := filepath.Join(filepath.Dir(spec.ConsoleLog), strings.Repeat("l", 100))
				os.MkdirAll(long, 0o755)
				sock = filepath.Join(long, "agent.sock")
			}
			spec.Exec = Exec{Path: "/bin/vsockprobe", Args: []string{"serve", "1024"}}
			spec.Vsock = []VsockPort{{Port: 1024, HostPath: sock, Listen: true}}
			spec.Network = network
			v := startVM(t, dir, spec)
			reply := exchange(t, v, spec, sock, "ping")
			if reply != "guest:ping" {
				t.Errorf("reply %q", reply)
			}
			if es := wait(t, v); es.Code != 0 {
				t.Errorf("exit %v: %s", es, console(t, spec))
			}
		})
	}
}

// exchange connects to the guest through sock (retrying until the guest
// listens: before that libkrun resets the connection, and before its
// kernel activates vsock there is no socket), sends msg and returns the
// reply, within vmDeadline. It fails at once when the VM ended, with its
// console and runner log.
func exchange(t *testing.T, v *VM, spec *Spec, sock, msg string) string {
	t.Helper()
	deadline := time.Now().Add(vmDeadline())
	d, err := os.Open(filepath.Dir(sock))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	short := fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), filepath.Base(sock))
	for {
		c, err := net.Dial("unix", short)
		if err == nil {
			// A line, not a half-close: real libkrun ends the whole
			// connection when the host shuts down its writing half.
			c.Write([]byte(msg + "\n"))
			reply, _ := io.ReadAll(c)
			c.Close()
			if len(reply) > 0 {
				return string(reply)
			}
		}
		if st, _ := v.State(); st == StateStopped || time.Now().After(deadline) {
			t.Fatalf("no reply through %s (VM %s): %v\nconsole:\n%s\nrunner log:\n%s", sock, st, err, console(t, spec), v.logTail())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestVsockGuestDials(t *testing.T) {
	spec, dir := shellSpec(t, "")
	vsockProbe(t, spec.Root.Dir)
	// A host socket path longer than sun_path: the runner must cope.
	long := filepath.Join(filepath.Dir(spec.ConsoleLog), strings.Repeat("d", 100))
	os.MkdirAll(long, 0o755)
	sock := filepath.Join(long, "host.sock")
	l := listenLong(t, sock)
	defer l.Close()
	spec.Exec = Exec{Path: "/bin/vsockprobe", Args: []string{"dial", "2000", "hello from the guest"}}
	spec.Vsock = []VsockPort{{Port: 2000, HostPath: sock}}
	spec.Network = NetworkNone
	v := startVM(t, dir, spec)
	l.SetDeadline(time.Now().Add(20 * time.Second))
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("the guest's connection never arrived: %v\nconsole: %s", err, console(t, spec))
	}
	c.SetDeadline(time.Now().Add(vmDeadline()))
	got, err := bufio.NewReader(c).ReadString('\n')
	if got != "hello from the guest\n" {
		t.Errorf("host read %q (%v)", got, err)
	}
	c.Write([]byte("hello from the host\n"))
	// The guest closes first, once it has the reply (vsockprobe dial).
	if rest, err := io.ReadAll(c); len(rest) > 0 || err != nil {
		t.Errorf("after the reply: %q, %v; want the guest's end", rest, err)
	}
	c.Close()
	if es := wait(t, v); es.Code != 0 || console(t, spec) != "hello from the host" {
		t.Errorf("exit %v, console %q", es, console(t, spec))
	}
}

// listenLong listens on a unix socket whose path may exceed sun_path.
func listenLong(t *testing.T, p string) *net.UnixListener {
	t.Helper()
	d, err := os.Open(filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), filepath.Base(p)), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestFilesPlacedWithoutTouchingTheImage(t *testing.T) {
	for _, tt := range []struct {
		name       string
		legacy     bool
		wantInRoot bool // written into the writable layer rather than served by libkrun
	}{{"overlay files", false, false}, {"libkrun without overlay files", true, true}} {
		t.Run(tt.name, func(t *testing.T) {
			spec, dir := shellSpec(t, `cat /.krunbox/agent.json /etc/extra.conf; stat -c %a /.krunbox/krunbox-agent; cmp /.krunbox/krunbox-agent /bin/busybox && echo same`)
			if tt.legacy {
				skipIfReal(t)
				spec.Library = testkrun.Build(t, "-DTESTKRUN_LEGACY")
			}
			state := filepath.Dir(spec.ConsoleLog)
			image := spec.Root.Dir
			os.Symlink("busybox", filepath.Join(image, "bin", "cmp"))
			spec.Root = Root{Lower: image, Upper: filepath.Join(state, "upper"), Work: filepath.Join(state, "work"), Merged: filepath.Join(state, "merged")}
			spec.Files = []File{
				{Path: "/.krunbox/krunbox-agent", Mode: 0o755, Source: filepath.Join(image, "bin", "busybox")},
				{Path: "/.krunbox/agent.json", Mode: 0o644, Data: []byte(`{"agent":true}` + "\n")},
				{Path: "/etc/extra.conf", Mode: 0o600, Data: []byte("extra\n")},
			}
			if es := wait(t, startVM(t, dir, spec)); es.Code != 0 {
				t.Fatalf("exit %v: %s", es, console(t, spec))
			}
			if got := console(t, spec); got != "{\"agent\":true}\nextra\n755\nsame\n" {
				t.Errorf("guest saw %q", got)
			}
			if _, err := os.Stat(filepath.Join(image, ".krunbox")); err == nil {
				t.Error("files written into the image")
			}
			_, err := os.Stat(filepath.Join(spec.Root.Upper, ".krunbox", "agent.json"))
			if inRoot := err == nil; inRoot != tt.wantInRoot {
				t.Errorf("agent config in the writable layer: %v, want %v", inRoot, tt.wantInRoot)
			}
			// /etc exists in the image: always written into the writable layer.
			if got := readFile(t, filepath.Join(spec.Root.Upper, "etc", "extra.conf")); got != "extra\n" {
				t.Errorf("writable layer /etc/extra.conf = %q", got)
			}
		})
	}
}

func TestSharesUnderTheDouble(t *testing.T) {
	// The guest mounts shares itself; the double offers them ready-made.
	mnt, script := "/dev/.testkrun/virtiofs", ""
	if realLib != "" {
		mnt, script = "/mnt", "mkdir -p /mnt/rw /mnt/ro; mount -t virtiofs rw /mnt/rw; mount -t virtiofs ro /mnt/ro; "
	}
	spec, dir := shellSpec(t, script+strings.ReplaceAll(`cat MNT/rw/in; echo out > MNT/rw/out; echo x > MNT/ro/x || echo ro-refused`, "MNT", mnt))
	rw, ro := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(rw, "in"), []byte("from host\n"), 0o644)
	spec.Shares = []Share{{Tag: "rw", HostPath: rw}, {Tag: "ro", HostPath: ro, ReadOnly: true}}
	if es := wait(t, startVM(t, dir, spec)); es.Code != 0 {
		t.Fatalf("exit %v", es)
	}
	out := console(t, spec)
	if !strings.HasPrefix(out, "from host\n") || !strings.Contains(out, "ro-refused") {
		t.Errorf("console %q", out)
	}
	if readFile(t, filepath.Join(rw, "out")) != "out\n" {
		t.Error("guest write did not reach the read-write share")
	}
	if _, err := os.Stat(filepath.Join(ro, "x")); err == nil {
		t.Error("guest wrote to the read-only share")
	}
}

// TestShareThroughASymlinkIsRefused: the runner opens each share with no
// symlink on the way and gives libkrun that directory, so a share whose
// recorded path a guest turned into a symlink since (it writes the
// parent) is not shared: the runner refuses to start, and the directory
// the link leads to is neither seen nor changed.
func TestShareThroughASymlinkIsRefused(t *testing.T) {
	base := t.TempDir()
	victim := filepath.Join(base, "victim")
	ws := filepath.Join(base, "ws")
	for _, d := range []string{victim, ws, filepath.Join(victim, "sub")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(victim, "secret"), []byte("victim's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(ws, "data")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, path string }{
		{"the last component", filepath.Join(ws, "data")},
		{"a component on the way", filepath.Join(ws, "data", "sub")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec, dir := shellSpec(t, "ls /dev/.testkrun/virtiofs/d /mnt; echo pwned > /dev/.testkrun/virtiofs/d/secret")
			spec.Shares = []Share{{Tag: "d", HostPath: tt.path}}
			_, err := Start(context.Background(), dir, spec)
			var se *StartError
			if !errors.As(err, &se) || se.Status.Code != ExitRunnerFailed || !strings.Contains(se.Log, "share d") {
				t.Fatalf("Start with a share through a symlink: %v, want the runner to refuse the share", err)
			}
			if out, _ := os.ReadFile(spec.ConsoleLog); len(out) != 0 {
				t.Errorf("the guest ran: console %q", out)
			}
			if b, _ := os.ReadFile(filepath.Join(victim, "secret")); string(b) != "victim's" {
				t.Errorf("victim's file is now %q", b)
			}
		})
	}
}

// Protected paths are mounts the runner makes under a share, in its own
// mount namespace: the guest cannot write a read-only one nor rename a
// pinned one, writes elsewhere in the share work, and the caller's mount
// namespace never sees them. A symlink planted at a protected path, or a
// runner without its namespace, fails the start.
func TestProtectedPaths(t *testing.T) {
	mnt, script := "/dev/.testkrun/virtiofs", ""
	if realLib != "" {
		mnt, script = "/mnt", "mkdir -p /mnt/rw; mount -t virtiofs rw /mnt/rw; "
	}
	script += strings.ReplaceAll(`cd MNT/rw;
echo evil > g/hooks/pre-commit || echo hook-refused;
echo evil >> g/config || echo config-refused;
echo evil > g/config.new && mv g/config.new g/config || echo rename-refused;
rm -r g/hooks || echo rmdir-refused;
mv g g2 || echo mv-refused;
echo obj > g/objects/o && echo obj-written`, "MNT", mnt)
	script = strings.ReplaceAll(script, "\n", " ")
	spec, dir := shellSpec(t, script)
	rw := t.TempDir()
	g := filepath.Join(rw, "g")
	for _, d := range []string{"hooks", "objects"} {
		if err := os.MkdirAll(filepath.Join(g, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(g, "config"), []byte("[core]\n"), 0o644)
	spec.Shares = []Share{{Tag: "rw", HostPath: rw}}
	spec.Protect = []Protect{{Path: g, Writable: true}, {Path: filepath.Join(g, "hooks")}, {Path: filepath.Join(g, "config")}}
	if es := wait(t, startVM(t, dir, spec)); es.Code != 0 {
		t.Fatalf("exit %v: %s", es, readFile(t, spec.ConsoleLog))
	}
	out := strings.ReplaceAll(readFile(t, spec.ConsoleLog), "\r\n", "\n") // a real VM's console
	for _, want := range []string{"hook-refused", "config-refused", "rename-refused", "rmdir-refused", "mv-refused", "obj-written"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("console lacks %q: %q", want, out)
		}
	}
	if got := readFile(t, filepath.Join(g, "config")); got != "[core]\n" {
		t.Errorf("config on the host: %q", got)
	}
	if ents, _ := os.ReadDir(filepath.Join(g, "hooks")); len(ents) != 0 {
		t.Errorf("hooks on the host: %v", ents)
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), g) {
		t.Errorf("the caller's mount namespace has the protecting mounts:\n%s", b)
	}

	t.Run("symlink planted", func(t *testing.T) {
		skipIfReal(t)
		spec, dir := shellSpec(t, "echo booted")
		rw := t.TempDir()
		os.Mkdir(filepath.Join(rw, "elsewhere"), 0o755)
		os.Symlink("elsewhere", filepath.Join(rw, "hooks"))
		spec.Shares = []Share{{Tag: "rw", HostPath: rw}}
		spec.Protect = []Protect{{Path: filepath.Join(rw, "hooks")}}
		_, err := Start(t.Context(), dir, spec)
		var se *StartError
		if !errors.As(err, &se) || !strings.Contains(se.Log, "symlink") {
			t.Fatalf("start with a symlink at a protected path: %v, want a StartError naming the symlink", err)
		}
	})
	t.Run("no namespaces", func(t *testing.T) {
		skipIfReal(t)
		saved := checkNamespaces
		checkNamespaces = func() error { return errors.New("simulated") }
		t.Cleanup(func() { checkNamespaces = saved })
		spec, dir := shellSpec(t, "echo booted")
		if ProtectsPaths(spec.Root) {
			t.Error("ProtectsPaths without namespaces")
		}
		rw := t.TempDir()
		spec.Shares = []Share{{Tag: "rw", HostPath: rw}}
		spec.Protect = []Protect{{Path: rw, Writable: true}}
		_, err := Start(t.Context(), dir, spec)
		var se *StartError
		if !errors.As(err, &se) || !strings.Contains(se.Log, "mount namespace") {
			t.Fatalf("start with protected paths and no namespaces: %v, want a StartError", err)
		}
	})
}

func TestProbe(t *testing.T) {
	skipIfReal(t)
	r, err := Probe(t.Context(), testkrun.Library(t))
	if err != nil {
		t.Fatal(err)
	}
	if !r.TestDouble || r.LoadErr != "" || r.ContextErr != "" || len(r.Missing) != 0 || len(r.Features) != 12 {
		t.Errorf("probe of the double: %+v", r)
	}
	legacy, err := Probe(t.Context(), testkrun.Build(t, "-DTESTKRUN_LEGACY"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(legacy.Missing, " "), "krun_add_virtiofs3") || !strings.Contains(legacy.ContextErr, "needs libkrun 1.1") {
		t.Errorf("probe of a pre-1.17 library: %+v", legacy)
	}
	missing, err := Probe(t.Context(), "/nonexistent/libkrun.so.1")
	if err != nil || !strings.Contains(missing.LoadErr, "/nonexistent/libkrun.so.1") {
		t.Errorf("probe of a missing library: %+v, %v", missing, err)
	}
	// A libkrun that is not the double, and the libkrunfw it would boot.
	krunfw := testkrun.Krunfw(t, "int krunfw_get_version(void) { return 4; }")
	t.Setenv("LD_LIBRARY_PATH", filepath.Dir(krunfw)) // for the probe process
	r, err = Probe(t.Context(), testkrun.Build(t, "-DTESTKRUN_UNMARKED"))
	if err != nil {
		t.Fatal(err)
	}
	if r.TestDouble || r.Krunfw != krunfw || r.KrunfwVersion != 4 || r.KrunfwErr != "" || r.ContextErr != "" {
		t.Errorf("probe of libkrun with libkrunfw %s, ABI version 4: %+v", krunfw, r)
	}
}

func TestPreflight(t *testing.T) {
	skipIfReal(t)
	double := testkrun.Library(t)
	libkrun := testkrun.Build(t, "-DTESTKRUN_UNMARKED") // the double passing for libkrun
	kvm := filepath.Join(t.TempDir(), "kvm")            // a stand-in device that opens
	os.WriteFile(kvm, nil, 0o600)
	// Directories for LD_LIBRARY_PATH: with a libkrunfw, with one lacking
	// krunfw_get_version, with none.
	krunfw := filepath.Dir(testkrun.Krunfw(t, "int krunfw_get_version(void) { return 4; }"))
	oddKrunfw := filepath.Dir(testkrun.Krunfw(t, "int krunfw_get_kernel(void) { return 0; }"))
	noKrunfw := t.TempDir()
	for _, tc := range []struct {
		name, lib, kvm, krunfw string
		want, hint             []string // empty want: no error
	}{
		{"the double needs no KVM", double, "", noKrunfw, nil, nil},
		{"a device forced and present", double, kvm, noKrunfw, nil, nil},
		{"a device forced and missing", double, "/nonexistent/kvm", noKrunfw, []string{"cannot start VMs on this host", "cannot use KVM"}, []string{"no /nonexistent/kvm", "'krunbox doctor'"}},
		{"no libkrun", "/nonexistent/libkrun.so.1", kvm, krunfw, []string{"load libkrun", "/nonexistent/libkrun.so.1"}, []string{"install libkrun", "'krunbox doctor'"}},
		{"no libkrun and no KVM", "/nonexistent/libkrun.so.1", "/nonexistent/kvm", krunfw, []string{"cannot use KVM", "load libkrun"}, []string{"no /nonexistent/kvm", "install libkrun"}},
		{"a library that aborts", testkrun.AbortingLibrary(t), kvm, krunfw, []string{"SIGABRT"}, []string{"reinstall libkrun"}},
		{"libkrun and libkrunfw", libkrun, kvm, krunfw, nil, nil},
		{"libkrun without libkrunfw", libkrun, kvm, noKrunfw, []string{"load libkrunfw", testkrun.KrunfwName}, []string{"install libkrunfw", "'krunbox doctor'"}},
		{"libkrunfw without krunfw_get_version", libkrun, kvm, oddKrunfw, []string{"load libkrunfw", "no krunfw_get_version"}, []string{"install libkrunfw"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.lib == libkrun && tc.krunfw == noKrunfw {
				if f, _, err := krun.KrunfwVersion(); err == nil {
					t.Skipf("this host has a libkrunfw (%s)", f)
				}
			}
			t.Setenv("LD_LIBRARY_PATH", tc.krunfw) // for the probe process
			t.Setenv(KVMDeviceEnv, tc.kvm)
			t.Setenv("TMPDIR", t.TempDir()) // an aborted probe cannot clean up
			err := Preflight(t.Context(), tc.lib, "")
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Preflight: %v", err)
				}
				return
			}
			var pe *PreflightError
			if !errors.As(err, &pe) {
				t.Fatalf("Preflight: %v, want a *PreflightError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			for _, w := range tc.hint {
				if !strings.Contains(pe.Hint(), w) {
					t.Errorf("hint %q lacks %q", pe.Hint(), w)
				}
			}
		})
	}
	var he *HypervisorError
	t.Setenv(KVMDeviceEnv, "/nonexistent/kvm")
	if err := Preflight(t.Context(), double, ""); !errors.As(err, &he) {
		t.Errorf("Preflight without KVM: %v, want it to wrap a *HypervisorError", err)
	}
	// No guest agent: Preflight says so.
	t.Setenv(KVMDeviceEnv, "")
	t.Setenv("KRUNBOX_AGENT", "/nonexistent/krunbox-agent")
	if err := Preflight(t.Context(), double, ""); err == nil || !strings.Contains(err.Error(), "guest agent") {
		t.Errorf("Preflight without a guest agent: %v, want it to say so", err)
	}
}

// A library that aborts must not take the prober down.
func TestProbeSurvivesAnAbortingLibrary(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // the aborted probe cannot clean up
	lib := testkrun.AbortingLibrary(t)
	_, err := Probe(t.Context(), lib)
	if err == nil || !strings.Contains(err.Error(), "SIGABRT") {
		t.Fatalf("probe of an aborting library: %v, want an error reporting the abort", err)
	}
}

// A user's Go program, whose main has no runner line, starts VMs: importing
// hostapi/vmm makes it its own runner.
func TestSDKProgramIsItsOwnRunner(t *testing.T) {
	spec, dir := shellSpec(t, "echo from-sdk; exit 7")
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go to build testdata/sdkprogram")
	}
	prog := filepath.Join(t.TempDir(), "sdkprogram")
	if out, err := exec.Command("go", "build", "-o", prog, "./testdata/sdkprogram").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteSpec(dir, spec); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(prog, dir).Output()
	if err != nil || strings.TrimSpace(string(out)) != "7" {
		t.Fatalf("sdkprogram: %q, %v", out, err)
	}
	if got := console(t, spec); got != "from-sdk\n" {
		t.Errorf("console %q", got)
	}
}
