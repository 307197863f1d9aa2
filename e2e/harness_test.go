package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/testutil/poll"
	"github.com/krunbox/krunbox/internal/testutil/testkrun"
)

// mode says which libkrun a suite boots VMs with.
type mode string

const (
	double mode = "double"
	real   mode = "real"
)

// suite describes how the VMs of one run of the scenarios start.
type suite struct {
	mode mode
	// lib is KRUNBOX_LIBKRUN for krunbox: the test double, or the real
	// library when one was named.
	lib string
	// stale, when not empty, is doctor's word that the library cannot
	// make shares coherent (its "✗ live workspace" line).
	stale string
}

// scenario is one end-to-end test, run by every suite.
type scenario struct {
	name string
	run  func(t *testing.T, e *env)
}

// scenarios are run by every suite, in this order.
var scenarios = []scenario{
	{"ExitCodes", testExitCodes},
	{"CannotStartVMs", testCannotStartVMs},
	{"ImageCommandAndStdin", testImageCommandAndStdin},
	{"SignalsForwarded", testSignalsForwarded},
	{"Terminal", testTerminal},
	{"EnvironmentNotLeaked", testEnvironmentNotLeaked},
	{"ReadOnlyMount", testReadOnlyMount},
	{"Workspace", testWorkspace},
	{"LiveWorkspace", testLiveWorkspace},
	{"FileEvents", testFileEvents},
	{"FileEventsNotDelivered", testFileEventsNotDelivered},
	{"StaleWorkspaceSaid", testStaleWorkspaceSaid},
	{"GitWorktree", testGitWorktree},
	{"GitReadOnly", testGitReadOnly},
	{"GitWritable", testGitWritable},
	{"Isolated", testIsolated},
	{"NamedSandboxPersists", testNamedSandboxPersists},
	{"CopyRoot", testCopyRoot},
	{"BlockRoot", testBlockRoot},
	{"BlockRootHostile", testBlockRootHostile},
	{"RmLeavesNothing", testRmLeavesNothing},
	{"ConcurrentStarts", testConcurrentStarts},
	{"KilledRunner", testKilledRunner},
	{"KilledRunClient", testKilledRunClient},
	{"ExecNeedsARunningSandbox", testExecNeedsARunningSandbox},
	{"IdleTimeout", testIdleTimeout},
	{"LongStatePath", testLongStatePath},
	{"Network", testNetwork},
	{"NetHost", testNetHost},
	{"NetStack", testNetStack},
	{"NetRefusalsAndRules", testNetRefusalsAndRules},
	{"NetProtocols", testNetProtocols},
	{"Secrets", testSecrets},
	{"Copy", testCopy},
	{"Logs", testLogs},
	{"LogsBounded", testLogsBounded},
	{"Inspect", testInspect},
	{"ConfigLayers", testConfigLayers},
	{"ImagesInUseAreKept", testImagesInUseAreKept},
	{"HostBoundary", testHostBoundary},
	{"RunOutlivesItsClient", testRunOutlivesItsClient},
	{"TermEscalates", testTermEscalates},
	{"RunDetached", testRunDetached},
	{"SeveralNames", testSeveralNames},
	{"PullFlag", testPullFlag},
	{"ListAll", testListAll},
	{"Entrypoint", testEntrypoint},
	{"WorkdirMade", testWorkdirMade},
	{"ExecSandboxRemoved", testExecSandboxRemoved},
	{"CopyStopped", testCopyStopped},
	{"CopyTar", testCopyTar},
	{"LimitsSoak", testLimitsSoak},
	{"MCPSession", testMCPSession},
}

// TestDouble runs every scenario with VMs on the libkrun test double.
func TestDouble(t *testing.T) {
	if want := os.Getenv("KRUNBOX_E2E_LIBKRUN"); want == string(real) {
		t.Skip("KRUNBOX_E2E_LIBKRUN=real")
	}
	runSuite(t, &suite{mode: double, lib: testkrun.Library(t)})
}

// TestRealLibkrun runs every scenario with real microVMs. It says SKIP,
// loudly, where there is no KVM or no libkrun.
func TestRealLibkrun(t *testing.T) {
	want := os.Getenv("KRUNBOX_E2E_LIBKRUN")
	if want == string(double) {
		t.Skip("KRUNBOX_E2E_LIBKRUN=double")
	}
	s := &suite{mode: real, lib: os.Getenv("KRUNBOX_LIBKRUN")}
	// doctor checks what krunbox needs and tells the double apart.
	res := s.doctor(t)
	if res.code != 0 || strings.Contains(res.stdout, "test double") {
		why := "krunbox doctor:\n" + res.stdout + res.stderr
		if strings.Contains(res.stdout, "test double") {
			why = "KRUNBOX_LIBKRUN is the test double"
		}
		if want == string(real) {
			t.Fatalf("KRUNBOX_E2E_LIBKRUN=real, but real VMs cannot start here: %s", why)
		}
		t.Skipf("SKIP real-libkrun e2e suite (no real VM can start here; see e2e/bundle/README.md to run it on a KVM host): %s", why)
	}
	s.stale = staleLine(res.stdout)
	runSuite(t, s)
}

// staleLine returns doctor's "✗ live workspace" line, or "".
func staleLine(doctor string) string {
	for l := range strings.Lines(doctor) {
		if strings.HasPrefix(l, "✗ live workspace: ") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

func runSuite(t *testing.T, s *suite) {
	if imageErr != nil {
		t.Skipf("no test image: %v (apt-get install busybox-static, or set KRUNBOX_E2E_IMAGE)", imageErr)
	}
	if s.mode == double {
		// The double needs namespaces: doctor checks them (a copied
		// root does without, not the double).
		if res := s.doctor(t); res.code != 0 || strings.Contains(res.stdout, "✗ namespaces") {
			t.Skipf("the libkrun test double cannot run here:\n%s", res.stdout)
		}
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, newEnv(t, s)) })
	}
}

func (s *suite) doctor(t testing.TB) result {
	e := &env{t: t, suite: s, home: t.TempDir()}
	// Its boot check decides whether real VMs start here: a nested VM
	// (../shared/realvm) takes longer to boot than the default allows.
	return e.krunbox("doctor", "--boot-timeout", "2m")
}

// env is one scenario's krunbox installation: its own KRUNBOX_HOME, the
// suite's libkrun, the test image pulled.
type env struct {
	t     testing.TB
	suite *suite
	home  string
	// extra are KEY=VALUE entries added to krunbox's environment.
	extra []string
}

func newEnv(t testing.TB, s *suite) *env {
	e := &env{t: t, suite: s, home: t.TempDir()}
	t.Cleanup(e.cleanup)
	return e
}

// keepLogsEnv names a folder where the sandboxes of a test that failed
// leave their console, runner log and network log (hack/realvm sets it to
// one in L1's /out, for the diagnosis of nested VMs).
const keepLogsEnv = "KRUNBOX_E2E_KEEP_LOGS"

// cleanup removes every sandbox left, so that no VM outlives its test; when
// the test failed, it keeps their logs first (keepLogsEnv).
func (e *env) cleanup() {
	if dir := os.Getenv(keepLogsEnv); dir != "" && e.t.Failed() {
		e.keepLogs(dir)
	}
	res := e.krunbox("ls", "-a", "-q")
	for _, name := range strings.Fields(res.stdout) {
		if r := e.krunbox("rm", "-f", name); r.code != 0 {
			e.t.Errorf("cleanup: rm -f %s: %s", name, r)
		}
	}
}

// keepLogs copies the logs of the sandboxes left into dir, each named
// TEST-SANDBOX-FILE.
func (e *env) keepLogs(dir string) {
	sandboxes, _ := filepath.Glob(filepath.Join(e.home, "state", "sandboxes", "*"))
	test := strings.ReplaceAll(e.t.Name(), "/", "_")
	for _, sb := range sandboxes {
		for _, f := range []string{"console.log", "console.log.1", "runner.log", "runner.log.1", "net.log", "net.log.1"} {
			b, err := os.ReadFile(filepath.Join(sb, f))
			if err != nil {
				continue
			}
			err = os.MkdirAll(dir, 0o755)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, test+"-"+filepath.Base(sb)+"-"+f), b, 0o644)
			}
			if err != nil {
				e.t.Logf("keep the logs of %s: %v", sb, err)
			}
		}
	}
}

// passedEnv are the variables of the test's environment, besides PATH and
// HOME, that krunbox gets too when they are set: the temporary directory,
// and where the dynamic loader finds libraries (a libkrun installed
// outside the loader's default directories is found through
// LD_LIBRARY_PATH by krunbox in the suite as by `krunbox doctor` run from
// the same shell).
var passedEnv = []string{"TMPDIR", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "DYLD_FALLBACK_LIBRARY_PATH"}

// environ is krunbox's environment: nothing of the test's but PATH, HOME
// and passedEnv, so that a leak would be the product's.
func (e *env) environ() []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "KRUNBOX_HOME=" + e.home}
	for _, k := range passedEnv {
		if v := os.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	if e.suite.lib != "" {
		env = append(env, "KRUNBOX_LIBKRUN="+e.suite.lib)
	}
	if n := os.Getenv(cpusEnv); n != "" {
		env = append(env, "KRUNBOX_CPUS="+n)
	}
	return append(env, e.extra...)
}

// result is how a krunbox command ended.
type result struct {
	args           []string
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("krunbox %s: exit %d\nstdout: %q\nstderr: %q", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// command returns krunbox with args, in the env.
func (e *env) command(args ...string) *exec.Cmd {
	cmd := exec.Command(krunboxBin, args...)
	cmd.Env = e.environ()
	return cmd
}

// krunbox runs krunbox to completion with stdin from /dev/null.
func (e *env) krunbox(args ...string) result {
	return e.krunboxIn(nil, args...)
}

// krunboxIn runs krunbox with stdin.
func (e *env) krunboxIn(stdin []byte, args ...string) result {
	e.t.Helper()
	cmd := e.command(args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := result{args: args, stdout: out.String(), stderr: errOut.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("krunbox %v: %v", args, err)
	}
	return r
}

// ok runs krunbox, which must exit 0, and returns its stdout.
func (e *env) ok(args ...string) string {
	e.t.Helper()
	r := e.krunbox(args...)
	if r.code != 0 {
		e.t.Fatalf("%s", r)
	}
	return r.stdout
}

// pull pulls the test image into the env's cache, so that later commands
// print no progress.
func (e *env) pull() {
	e.t.Helper()
	e.ok("pull", image)
}

// started creates and starts a sandbox called name from the test image,
// with flags, and returns its state directory.
func (e *env) started(name string, flags ...string) string {
	e.t.Helper()
	e.pull()
	args := append(append([]string{"create", "--name", name}, flags...), image)
	if out := e.ok(args...); strings.TrimSpace(out) != name {
		e.t.Fatalf("create printed %q, want the name %q", out, name)
	}
	e.ok("start", name)
	return e.sandboxDir(name)
}

func (e *env) sandboxDir(name string) string {
	return filepath.Join(e.home, "state", "sandboxes", name)
}

// lsEntry is one sandbox of ls --json.
type lsEntry struct {
	Name, Image, State, Workspace, Reason string
	Pid                                   int
}

func (e *env) ls() map[string]lsEntry {
	e.t.Helper()
	var entries []lsEntry
	if err := json.Unmarshal([]byte(e.ok("ls", "-a", "--json")), &entries); err != nil {
		e.t.Fatal(err)
	}
	out := map[string]lsEntry{}
	for _, s := range entries {
		out[s.Name] = s
	}
	return out
}

// inspect returns krunbox inspect's JSON.
func (e *env) inspect(name string) map[string]any {
	e.t.Helper()
	var v []map[string]any
	if err := json.Unmarshal([]byte(e.ok("inspect", name)), &v); err != nil {
		e.t.Fatal(err)
	}
	if len(v) != 1 {
		e.t.Fatalf("inspect %s: %d objects, want 1", name, len(v))
	}
	return v[0]
}

// processesOf returns the pids of the processes whose command line
// mentions dir (the runner's is "krunbox-vm DIR"), with their parents.
func processesOf(dir string) map[int]int {
	procs := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), dir) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 && fields[0] != "Z" {
			procs[pid], _ = strconv.Atoi(fields[1])
		}
	}
	return procs
}

// startCmd starts cmd, killed when the test ends, and returns a channel
// receiving its exit code.
func startCmd(t *testing.T, cmd *exec.Cmd) <-chan int {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		cmd.Wait()
		done <- cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	return done
}

// exitOf waits for the exit code from startCmd, failing the test after
// timeout.
func exitOf(t *testing.T, done <-chan int, timeout time.Duration, what string) int {
	t.Helper()
	timeout = poll.Scaled(timeout)
	select {
	case code := <-done:
		return code
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v", what, timeout)
		return -1
	}
}
