package e2e

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/testutil/poll"
)

func testNamedSandboxPersists(t *testing.T, e *env) {
	e.started("keep")
	if st := e.ls()["keep"]; st.State != "running" || st.Image != image {
		t.Fatalf("ls after start: %+v", st)
	}
	// Each step is another krunbox process: the sandbox lives on its own.
	e.ok("exec", "keep", "sh", "-c", "echo kept > /root/x; echo new > /etc/added")
	e.ok("stop", "keep")
	if st := e.ls()["keep"].State; st != "stopped" {
		t.Fatalf("state after stop: %q", st)
	}
	e.ok("start", "keep")
	if got := e.ok("exec", "keep", "cat", "/root/x", "/etc/added"); got != "kept\nnew\n" {
		t.Errorf("root file system changes after stop and start: %q", got)
	}
	// Not in another sandbox of the same image, nor in the image cache.
	e.ok("create", "--name", "other", image)
	e.ok("start", "other")
	if r := e.krunbox("exec", "other", "cat", "/root/x"); r.code == 0 {
		t.Errorf("another sandbox sees /root/x: %s", r)
	}
	var imgs []struct{ Rootfs string }
	if err := json.Unmarshal([]byte(e.ok("images", "--json")), &imgs); err != nil || len(imgs) != 1 {
		t.Fatalf("images --json: %v %v", imgs, err)
	}
	for _, p := range []string{"root/x", "etc/added"} {
		if _, err := os.Lstat(filepath.Join(imgs[0].Rootfs, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a guest write reached the image cache: %s: %v", p, err)
		}
	}
	// Names are unique.
	checkKrunboxError(t, e.krunbox("create", "--name", "keep", image), "already exists")
	checkKrunboxError(t, e.krunbox("create", "--name", "bad/name", image), "invalid sandbox name")
}

func testRmLeavesNothing(t *testing.T, e *env) {
	dir := e.started("gone")
	pid := e.ls()["gone"].Pid
	if pid == 0 || len(processesOf(dir)) == 0 {
		t.Fatalf("no runner for a running sandbox (pid %d)", pid)
	}
	// A running sandbox is refused without -f.
	checkKrunboxError(t, e.krunbox("rm", "gone"), "running")
	if got := e.ok("rm", "-f", "gone"); got != "gone\n" {
		t.Errorf("rm -f printed %q", got)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("sandbox directory left: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(e.home, "state", "trash")); len(entries) != 0 {
		t.Errorf("trash left: %d entries", len(entries))
	}
	poll.Until(t, "the VM's processes to end", 30*time.Second, func() bool { return len(processesOf(dir)) == 0 })
	if names := e.ok("ls", "-a", "-q"); names != "" {
		t.Errorf("ls after rm: %q", names)
	}
	checkKrunboxError(t, e.krunbox("rm", "gone"), "no such sandbox")
	checkKrunboxError(t, e.krunbox("exec", "gone", "true"), "no such sandbox")

	// A half-removed sandbox: damaged state is refused without -f, and
	// rm -f completes, as it does a removal interrupted in the trash.
	e.ok("create", "--name", "damaged", image)
	if err := os.WriteFile(filepath.Join(e.sandboxDir("damaged"), "sandbox.json"), []byte("{trunc"), 0o600); err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(e.home, "state", "trash", "old-123", "sandbox", "upper")
	if err := os.MkdirAll(leftover, 0o700); err != nil {
		t.Fatal(err)
	}
	checkKrunboxError(t, e.krunbox("rm", "damaged"), "damaged")
	e.ok("rm", "-f", "damaged")
	if _, err := os.Stat(e.sandboxDir("damaged")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("damaged sandbox left: %v", err)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an interrupted removal's leftovers were not cleaned: %v", err)
	}
}

func testConcurrentStarts(t *testing.T, e *env) {
	e.pull()
	e.ok("create", "--name", "race", image)
	dir := e.sandboxDir("race")
	const n = 4
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = e.krunbox("start", "race") })
	}
	wg.Wait()
	for _, r := range results {
		if r.code != 0 {
			t.Errorf("a concurrent start failed: %s", r)
		}
	}
	// One VM: one monitor process, the root of the VM's processes, and
	// the runner pid krunbox reports lives.
	procs := processesOf(dir)
	var roots []int
	for pid, ppid := range procs {
		if _, ok := procs[ppid]; !ok {
			roots = append(roots, pid)
		}
	}
	if len(roots) != 1 {
		t.Errorf("%d VMs run for one sandbox after %d concurrent starts (process roots %v of %v)", len(roots), n, roots, procs)
	}
	if pid := e.ls()["race"].Pid; procs[pid] == 0 {
		t.Errorf("the runner pid %d from ls is not among the VM's processes %v", pid, procs)
	}
	if got := e.ok("exec", "race", "echo", "one"); got != "one\n" {
		t.Errorf("exec after concurrent starts: %q", got)
	}
}

func testKilledRunner(t *testing.T, e *env) {
	dir := e.started("victim")
	e.ok("exec", "victim", "sh", "-c", "echo kept > /data-before-death && sync")
	pid := e.ls()["victim"].Pid
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "ls to say dead", 30*time.Second, func() bool { return e.ls()["victim"].State == "dead" })
	if st := e.ls()["victim"]; !strings.Contains(st.Reason, "SIGKILL") {
		t.Errorf("ls --json reason for a killed runner: %q, want it to say SIGKILL", st.Reason)
	}
	if out := e.ok("ls"); !strings.Contains(out, "dead") {
		t.Errorf("ls does not say dead:\n%s", out)
	}
	r := e.krunbox("exec", "victim", "true")
	checkKrunboxError(t, r, "SIGKILL")
	if !strings.Contains(r.stderr, "krunbox logs victim") || !strings.Contains(r.stderr, "krunbox start victim") {
		t.Errorf("exec in a dead sandbox: no hint at its logs and at start: %s", r)
	}
	poll.Until(t, "the VM's processes to end", 30*time.Second, func() bool { return len(processesOf(dir)) == 0 })
	// What the killed runner left (its socket, its pid file) does not pass
	// for a live VM, nor stop it from starting again.
	if _, err := os.Lstat(filepath.Join(dir, "agent.sock")); err != nil {
		t.Errorf("the killed VM's socket: %v; want it left for start to clean", err)
	}
	e.ok("start", "victim")
	if got := e.ok("exec", "victim", "echo", "back"); got != "back\n" {
		t.Errorf("after a restart: %q", got)
	}
	if got := e.ok("exec", "victim", "cat", "/data-before-death"); got != "kept\n" {
		t.Errorf("after a restart, what the guest wrote before its death: %q", got)
	}
	if newPid := e.ls()["victim"].Pid; newPid == pid || newPid == 0 {
		t.Errorf("runner pid after restart: %d (was %d)", newPid, pid)
	}
	// Killed again: rm without -f cleans a dead sandbox.
	syscall.Kill(e.ls()["victim"].Pid, syscall.SIGKILL)
	poll.Until(t, "ls to say dead", 30*time.Second, func() bool { return e.ls()["victim"].State == "dead" })
	e.ok("rm", "victim")
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("dead sandbox not removed: %v", err)
	}
}

// testKilledRunClient kills a "krunbox run" client while its command runs:
// its ad-hoc sandbox, which it can no longer remove, goes with the next
// krunbox that looks once its VM has stopped.
func testKilledRunClient(t *testing.T, e *env) {
	e.pull()
	client := e.command("run", image, "--", "sleep", "600")
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	var name string
	poll.Until(t, "the ad-hoc sandbox to run", 30*time.Second, func() bool {
		for n, st := range e.ls() {
			if st.State == "running" {
				name = n
				return true
			}
		}
		return false
	})
	client.Process.Kill()
	client.Wait()
	dir := e.sandboxDir(name)
	if _, ok := e.ls()[name]; !ok {
		t.Fatalf("%s gone while its VM still runs", name)
	}
	// Its VM stops (asked here; on its own it would after its idle timeout,
	// the killed client's command having been killed with its connection).
	e.ok("stop", name)
	if _, ok := e.ls()[name]; ok {
		t.Errorf("ls lists %s, an ended ad-hoc sandbox", name)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the ended ad-hoc sandbox's directory: %v, want it removed", err)
	}
}

func testExecNeedsARunningSandbox(t *testing.T, e *env) {
	e.pull()
	e.ok("create", "--name", "idle", image)
	r := e.krunbox("exec", "idle", "true")
	checkKrunboxError(t, r, "never started")
	if !strings.Contains(r.stderr, "krunbox start idle") {
		t.Errorf("no hint at start: %s", r)
	}
	e.ok("start", "idle")
	e.ok("stop", "idle")
	checkKrunboxError(t, e.krunbox("exec", "idle", "true"), "stopped")
	// Stopping twice is fine; starting after a stop works.
	e.ok("stop", "idle")
	e.ok("start", "idle")
	e.ok("exec", "idle", "true")
}

func testIdleTimeout(t *testing.T, e *env) {
	e.started("nap", "--idle-timeout", "1s")
	poll.Until(t, "the idle sandbox to stop itself", 60*time.Second, func() bool { return e.ls()["nap"].State == "stopped" })
}

func testLongStatePath(t *testing.T, e *env) {
	// Unix socket paths hold 108 bytes: krunbox must cope with deep homes.
	e.home = filepath.Join(e.home, strings.Repeat("deep-directory-", 8))
	if err := os.MkdirAll(e.home, 0o700); err != nil {
		t.Fatal(err)
	}
	if sock := filepath.Join(e.sandboxDir("a-long-sandbox-name"), "agent.sock"); len(sock) <= 108 {
		t.Fatalf("socket path only %d bytes", len(sock))
	}
	e.started("a-long-sandbox-name")
	if got := e.ok("exec", "a-long-sandbox-name", "echo", "deep"); got != "deep\n" {
		t.Errorf("exec with a long socket path: %q", got)
	}
}
