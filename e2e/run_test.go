package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/testutil/poll"
	"github.com/krunbox/krunbox/internal/testutil/syncbuf"
)

// checkKrunboxError checks a failure of krunbox itself: exit 125, one
// "krunbox: " line holding want, and at most a hint line; it returns the
// hint.
func checkKrunboxError(t *testing.T, r result, want string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if r.code != 125 || len(lines) > 2 || !strings.HasPrefix(lines[0], "krunbox: ") || !strings.Contains(lines[0], want) ||
		len(lines) == 2 && !strings.HasPrefix(lines[1], "hint: ") {
		t.Errorf("want exit 125, \"krunbox: ...%s...\" and at most a hint line; got %s", want, r)
		return ""
	}
	if len(lines) < 2 {
		return ""
	}
	return strings.TrimPrefix(lines[1], "hint: ")
}

func testExitCodes(t *testing.T, e *env) {
	e.pull()
	r := e.krunbox("run", image, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
	if r.code != 7 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Errorf("want exit 7, stdout out, stderr err; got %s", r)
	}
	if r := e.krunbox("run", image, "true"); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Errorf("true: %s", r)
	}
	if r := e.krunbox("run", image, "--", "sh", "-c", "kill -KILL $$"); r.code != 128+9 {
		t.Errorf("a command killed by SIGKILL: want exit 137; got %s", r)
	}
	r = e.krunbox("run", image, "--", "no-such-command")
	if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); r.code != 127 || len(lines) != 1 || !strings.Contains(lines[0], "no-such-command") {
		t.Errorf("a command not found: want exit 127 and one line naming it; got %s", r)
	}
	if r := e.krunbox("run", image, "--", "/etc/passwd"); r.code != 126 || !strings.Contains(r.stderr, "/etc/passwd") {
		t.Errorf("a file that is not executable: want exit 126; got %s", r)
	}
	// A missing working directory is made (WorkdirMade); a file is not one.
	if r := e.krunbox("run", "-w", "/etc/passwd", image, "--", "true"); r.code != 126 || !strings.Contains(r.stderr, "/etc/passwd") {
		t.Errorf("a working directory that is a file: want exit 126; got %s", r)
	}
	for _, tc := range []struct {
		args       []string
		want, hint string
	}{
		{[]string{"--cpus", "0", image, "true"}, "cpus", "--help"},
		{[]string{"--net", "wifi", image, "true"}, "wifi", "--help"},
		{[]string{"--no-such-flag", image, "true"}, "unknown flag", "--help"},
		{[]string{"-v", "/no/such/dir:/data", image, "true"}, "/no/such/dir", "HOST[:GUEST][:ro]"},
		{[]string{"-v", t.TempDir() + ":/proc", image, "true"}, "would shadow /proc", "HOST[:GUEST][:ro]"},
		{[]string{"oci:/no/such/layout:latest", "true"}, "/no/such/layout", ""},
	} {
		if hint := checkKrunboxError(t, e.krunbox(append([]string{"run"}, tc.args...)...), tc.want); !strings.Contains(hint, tc.hint) {
			t.Errorf("run %v: hint %q, want one with %q", tc.args, hint, tc.hint)
		}
	}
	// Ad-hoc runs leave nothing, failed or not.
	if names := strings.Fields(e.ok("ls", "-a", "-q")); len(names) != 0 {
		t.Errorf("sandboxes left by ad-hoc runs: %v", names)
	}
}

func testCannotStartVMs(t *testing.T, e *env) {
	// No KVM (a missing device, checked even under the test double) and
	// no libkrun: run, create and start fail at once, before any pull.
	for _, tc := range []struct {
		env, want, hint string
	}{
		{"KRUNBOX_KVM_DEVICE=/nonexistent/kvm", "cannot use KVM", "/nonexistent/kvm"},
		{"KRUNBOX_LIBKRUN=/nonexistent/libkrun.so.1", "load libkrun", "install libkrun"},
	} {
		e.extra = []string{tc.env}
		for _, args := range [][]string{{"run", image, "true"}, {"create", "--name", "x", image}} {
			r := e.krunbox(args...)
			hint := checkKrunboxError(t, r, "cannot start VMs on this host")
			if !strings.Contains(r.stderr, tc.want) || !strings.Contains(hint, tc.hint) || !strings.Contains(hint, "krunbox doctor") {
				t.Errorf("%s: want the reason %q and a hint with %q and krunbox doctor; got %s", tc.env, tc.want, tc.hint, r)
			}
		}
		if imgs := e.ok("images", "--json"); strings.TrimSpace(imgs) != "[]" {
			t.Errorf("%s: an image was pulled before the check: %s", tc.env, imgs)
		}
		if names := e.ok("ls", "-a", "-q"); names != "" {
			t.Errorf("%s: sandboxes left: %s", tc.env, names)
		}
	}
	// A sandbox made while VMs could start does not start without them.
	e.extra = nil
	e.pull()
	e.ok("create", "--name", "later", image)
	e.extra = []string{"KRUNBOX_KVM_DEVICE=/nonexistent/kvm"}
	if hint := checkKrunboxError(t, e.krunbox("start", "later"), "cannot use KVM"); !strings.Contains(hint, "krunbox doctor") {
		t.Errorf("start without KVM: hint %q", hint)
	}
	// No VM is left; ls says what happened.
	e.extra = nil
	if st := e.ls()["later"]; st.State != "dead" || st.Pid != 0 || !strings.Contains(st.Reason, "cannot use KVM") {
		t.Errorf("after the refused start: %+v; want dead, no runner, saying why", st)
	}
}

func testImageCommandAndStdin(t *testing.T, e *env) {
	e.pull()
	// No command: the image's (sh), reading the script from stdin.
	r := e.krunboxIn([]byte("echo from-stdin; exit 3\n"), "run", "-i", image)
	if r.code != 3 || r.stdout != "from-stdin\n" {
		t.Errorf("the image's command with a script on stdin: %s", r)
	}
	// -i streams stdin, all of it; without -i the command reads nothing.
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	r = e.krunboxIn(data, "run", "-i", image, "--", "sh", "-c", "wc -c")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "1048576" {
		t.Errorf("1 MiB through -i: %s", r)
	}
	r = e.krunboxIn([]byte("should not arrive"), "run", image, "--", "cat")
	if r.code != 0 || r.stdout != "" {
		t.Errorf("stdin without -i: %s", r)
	}
	// The image's command without -i: sh with an empty stdin exits 0.
	if r := e.krunbox("run", image); r.code != 0 {
		t.Errorf("the image's command: %s", r)
	}
}

func testSignalsForwarded(t *testing.T, e *env) {
	e.pull()
	for _, tc := range []struct {
		sig  syscall.Signal
		name string
		code int
	}{{syscall.SIGINT, "INT", 43}, {syscall.SIGTERM, "TERM", 44}, {syscall.SIGHUP, "HUP", 45}} {
		script := "trap 'echo got-" + tc.name + "; exit " + strconv.Itoa(tc.code) + "' " + tc.name + "; echo ready; while :; do sleep 0.05; done"
		cmd := e.command("run", image, "--", "sh", "-c", script)
		var out syncbuf.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		done := startCmd(t, cmd)
		poll.Until(t, "the guest script to start", 30*time.Second, func() bool { return strings.Contains(out.String(), "ready") })
		cmd.Process.Signal(tc.sig)
		if code := exitOf(t, done, 30*time.Second, "krunbox run after SIG"+tc.name); code != tc.code || !strings.Contains(out.String(), "got-"+tc.name) {
			t.Errorf("SIG%s to krunbox run: exit %d, output %q; want the guest's trap to run and exit %d", tc.name, code, out.String(), tc.code)
		}
	}
}

func testEnvironmentNotLeaked(t *testing.T, e *env) {
	e.pull()
	const secret = "s3cr3t-value-of-the-host"
	e.extra = []string{"KRUNBOX_E2E_SECRET=" + secret, "AWS_SECRET_ACCESS_KEY=" + secret}
	r := e.krunbox("run", "-e", "GIVEN=yes", image, "--", "sh", "-c", "env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'")
	if r.code != 0 || strings.Contains(r.stdout, secret) || strings.Contains(r.stdout, "KRUNBOX_E2E_SECRET") {
		t.Errorf("the host environment reached the guest: %s", r)
	}
	if !strings.Contains(r.stdout, "GIVEN=yes\n") {
		t.Errorf("-e GIVEN=yes did not: %s", r)
	}
	// Passing one explicitly by name works.
	r = e.krunbox("run", "-e", "KRUNBOX_E2E_SECRET", image, "--", "sh", "-c", "echo $KRUNBOX_E2E_SECRET")
	if r.code != 0 || r.stdout != secret+"\n" {
		t.Errorf("-e KRUNBOX_E2E_SECRET: %s", r)
	}
}

func testReadOnlyMount(t *testing.T, e *env) {
	e.pull()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.krunbox("run", "-v", dir+":/data:ro", image, "--", "sh", "-c", "cat /data/f; echo x > /data/g")
	if r.code == 0 || r.stdout != "content" || !strings.Contains(r.stderr, "Read-only file system") {
		t.Errorf("write to a read-only mount: want the read to work and the write to fail with EROFS; got %s", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "g")); err == nil {
		t.Error("the guest wrote through a read-only mount")
	}
	// The same directory read-write, at another guest path.
	r = e.krunbox("run", "-v", dir+":/data", image, "--", "sh", "-c", "echo x > /data/g")
	if b, err := os.ReadFile(filepath.Join(dir, "g")); r.code != 0 || string(b) != "x\n" {
		t.Errorf("write to a read-write mount: %s; host sees %q, %v", r, b, err)
	}
}
