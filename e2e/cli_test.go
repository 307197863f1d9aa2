package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/testutil/poll"
	"github.com/krunbox/krunbox/internal/testutil/syncbuf"
)

// testRunOutlivesItsClient kills "krunbox run" clients with SIGKILL while
// their command runs: the VM still stops when the command ends (named: the
// sandbox is kept, stopped; --rm: it is removed), with nobody watching.
func testRunOutlivesItsClient(t *testing.T, e *env) {
	e.pull()
	var namedOut, adhocOut syncbuf.Buffer
	named := e.command("run", "--name", "kept", image, "--", "sh", "-c", "echo started; sleep 3; echo the-end")
	named.Stdout = &namedOut
	adhoc := e.command("run", image, "--", "sh", "-c", "echo started; sleep 3")
	adhoc.Stdout = &adhocOut
	startCmd(t, named)
	startCmd(t, adhoc)
	// Running sandboxes are not enough: the clients are killed once their
	// commands have started (one killed before is hostapi.TestMainWait's).
	poll.Until(t, "both commands to start", 60*time.Second, func() bool {
		return strings.Contains(namedOut.String(), "started") && strings.Contains(adhocOut.String(), "started")
	})
	named.Process.Kill()
	adhoc.Process.Kill()
	poll.Until(t, "the named sandbox to stop and the ad-hoc one to go once their command ended", 30*time.Second, func() bool {
		ls := e.ls()
		return len(ls) == 1 && ls["kept"].State == "stopped"
	})
	// Its output, nobody reading it, went to the console.
	if out := e.ok("logs", "kept"); !strings.Contains(out, "the-end") {
		t.Errorf("the console of kept lacks the command's output: %q", out)
	}
}

// testTermEscalates sends SIGTERM to a "krunbox run -it" whose guest shell
// ignores it: the third one kills the shell, as repeated Ctrl-C does, and
// the sandbox goes.
func testTermEscalates(t *testing.T, e *env) {
	e.pull()
	term := e.onTerminal(24, 80, "run", "-it", image, "sh")
	term.send("echo sh''ell-ready\n")
	term.waitOutput("shell-ready", 1)
	sent := 0
	for exited := false; !exited; {
		if sent == 10 {
			t.Fatalf("krunbox run -it still runs after %d SIGTERMs; terminal:\n%s", sent, term.out.String())
		}
		term.proc.Signal(syscall.SIGTERM)
		sent++
		// Each signal is handled before the next is sent (signals do not
		// queue): wait for its effect, or a second.
		select {
		case <-term.done:
			exited = true
		case <-time.After(time.Second):
		}
	}
	if sent < 3 {
		t.Errorf("krunbox run -it exited after %d SIGTERMs: the guest's shell ignores them, want the third to kill it", sent)
	}
	if code := term.wait(); code != 137 {
		t.Errorf("exit %d, want 137 (killed); terminal:\n%s", code, term.out.String())
	}
	poll.Until(t, "the ad-hoc sandbox to go", 30*time.Second, func() bool { return len(e.ls()) == 0 })
}

// testRunDetached runs a command with -d: run prints the name and returns,
// the command runs on (its output in the logs), and its end stops the VM.
func testRunDetached(t *testing.T, e *env) {
	e.pull()
	out := e.ok("run", "-d", "--name", "bg", image, "--", "sh", "-c", "echo ran >> /runs; echo detached-output; sleep 2")
	if strings.TrimSpace(out) != "bg" {
		t.Errorf("run -d printed %q, want the name", out)
	}
	poll.Until(t, "the detached command to end and stop its VM", 60*time.Second, func() bool { return e.ls()["bg"].State == "stopped" })
	if logs := e.ok("logs", "bg"); !strings.Contains(logs, "detached-output") {
		t.Errorf("logs of bg lack the detached command's output: %q", logs)
	}
	// 'krunbox start' boots it again, keeps what it had, and does not rerun
	// the command.
	e.ok("start", "bg")
	if runs := e.ok("exec", "bg", "cat", "/runs"); runs != "ran\n" {
		t.Errorf("after start, /runs holds %q: want the command run once, by run -d only", runs)
	}
	checkKrunboxError(t, e.krunbox("run", "-d", "-t", image, "true"), "-d")
}

// testSeveralNames gives start, stop, rm and inspect several names, one
// of them missing: every other name is acted on, the missing one is
// reported, and the command fails.
func testSeveralNames(t *testing.T, e *env) {
	e.pull()
	e.ok("create", "--name", "a", image)
	e.ok("create", "--name", "b", image)
	for _, verb := range []string{"start", "stop"} {
		r := e.krunbox(verb, "a", "nosuch", "b")
		if r.code == 0 || !strings.Contains(r.stderr, "nosuch") || r.stdout != "a\nb\n" {
			t.Errorf("%s; want a and b done, nosuch reported, a failure", r)
		}
		want := map[string]string{"start": "running", "stop": "stopped"}[verb]
		if ls := e.ls(); ls["a"].State != want || ls["b"].State != want {
			t.Errorf("after %s a nosuch b: %v, want both %s", verb, ls, want)
		}
	}
	r := e.krunbox("inspect", "a", "nosuch", "b")
	var objs []struct{ Name string }
	if err := json.Unmarshal([]byte(r.stdout), &objs); err != nil || len(objs) != 2 || objs[0].Name != "a" || objs[1].Name != "b" {
		t.Errorf("%s: want a JSON array of a and b (%v)", r, err)
	}
	if r.code == 0 || !strings.Contains(r.stderr, "nosuch") {
		t.Errorf("%s: want nosuch reported and a failure", r)
	}
	r = e.krunbox("rm", "a", "nosuch", "b")
	if r.code == 0 || !strings.Contains(r.stderr, "nosuch") {
		t.Errorf("%s: want nosuch reported and a failure", r)
	}
	if ls := e.ls(); len(ls) != 0 {
		t.Errorf("after rm a nosuch b: %v left", ls)
	}
}

// testPullFlag pulls with docker's --pull (and its values) on every
// command that pulls, and with --policy, its hidden former name.
func testPullFlag(t *testing.T, e *env) {
	e.pull()
	for _, args := range [][]string{
		{"pull", "--pull", "never", image},
		{"pull", "--pull", "missing", image},
		{"pull", "--policy", "never", image},
		{"export", "--pull", "never", image, t.TempDir()},
		{"create", "--pull", "missing", "--name", "c", image},
		{"run", "--pull", "never", image, "true"},
		{"run", "--pull=missing", image, "true"},
	} {
		e.ok(args...)
	}
	for _, cmd := range []string{"pull", "export", "run", "create"} {
		help := e.ok(cmd, "--help")
		if !strings.Contains(help, "--pull") || strings.Contains(help, "--policy") {
			t.Errorf("krunbox %s --help: want --pull and not --policy:\n%s", cmd, help)
		}
	}
	r := e.krunbox("pull", "--pull", "never", "oci:"+t.TempDir()+":nosuch")
	if r.code == 0 || strings.Contains(r.stderr, "--policy") {
		t.Errorf("%s: want a failure whose hint names --pull", r)
	}
}

// testListAll: ls shows the running (and dead) sandboxes, ls -a the
// created and stopped ones too.
func testListAll(t *testing.T, e *env) {
	e.started("up")
	e.ok("create", "--name", "new", image)
	e.ok("create", "--name", "down", image)
	e.ok("start", "down")
	e.ok("stop", "down")
	if got := strings.Fields(e.ok("ls", "-q")); strings.Join(got, " ") != "up" {
		t.Errorf("ls -q: %v, want the running one only", got)
	}
	if got := e.ok("ls"); !strings.Contains(got, "up") || strings.Contains(got, "new") || strings.Contains(got, "down") {
		t.Errorf("ls:\n%s\nwant the running one only", got)
	}
	if got := strings.Fields(e.ok("ls", "--all", "-q")); strings.Join(got, " ") != "down new up" {
		t.Errorf("ls --all -q: %v, want all three", got)
	}
}

// testEntrypoint replaces the image's entrypoint and command.
func testEntrypoint(t *testing.T, e *env) {
	e.pull()
	if out := e.ok("run", "--entrypoint", "echo", image, "via", "entrypoint"); out != "via entrypoint\n" {
		t.Errorf("run --entrypoint echo IMAGE via entrypoint: %q", out)
	}
	if out := e.ok("run", "--entrypoint", "", image, "echo", "no-entrypoint"); out != "no-entrypoint\n" {
		t.Errorf("run --entrypoint '' IMAGE echo no-entrypoint: %q", out)
	}
}

// testWorkdirMade: -w names a directory the image lacks: it is made, as
// docker makes it.
func testWorkdirMade(t *testing.T, e *env) {
	e.pull()
	if out := e.ok("run", "-w", "/made/by/krunbox", image, "pwd"); out != "/made/by/krunbox\n" {
		t.Errorf("run -w /made/by/krunbox IMAGE pwd: %q", out)
	}
}

// testExecSandboxRemoved removes a sandbox under a running exec: the exec
// says so, and exits with its command's code (128+SIGTERM).
func testExecSandboxRemoved(t *testing.T, e *env) {
	e.started("gone")
	cmd := e.command("exec", "gone", "sh", "-c", "echo started; sleep 600")
	var out, errOut syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	done := startCmd(t, cmd)
	poll.Until(t, "the exec to start", 30*time.Second, func() bool { return strings.Contains(out.String(), "started") })
	e.ok("rm", "-f", "gone")
	code := exitOf(t, done, 60*time.Second, "krunbox exec in a removed sandbox")
	if code != 128+int(syscall.SIGTERM) || !strings.Contains(errOut.String(), "gone was stopped or removed while the command ran") {
		t.Errorf("exec in a sandbox removed under it: exit %d, stderr %q; want 143 and a message saying so", code, errOut.String())
	}
}

// testCopyStopped copies from and to a stopped sandbox whose guest planted
// links to host paths in its root: cp boots it for the copy and stops it
// again; links are copied as links, and nothing is read or written on the
// host through them.
func testCopyStopped(t *testing.T, e *env) {
	hostDir := t.TempDir()
	secret := filepath.Join(hostDir, "secret")
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.started("st")
	e.ok("exec", "st", "sh", "-c", "mkdir /data && echo guest-data > /data/f && ln -s "+secret+" /data/link && ln -s "+hostDir+" /data/evil && sync")
	e.ok("stop", "st")

	out := t.TempDir()
	e.ok("cp", "st:/data", out)
	if b, err := os.ReadFile(filepath.Join(out, "data", "f")); err != nil || string(b) != "guest-data\n" {
		t.Errorf("cp from a stopped sandbox: data/f %q, %v", b, err)
	}
	if target, err := os.Readlink(filepath.Join(out, "data", "link")); err != nil || target != secret {
		t.Errorf("cp from a stopped sandbox: data/link: %q, %v; want the guest's link, as a link", target, err)
	}
	if st := e.ls()["st"].State; st != "stopped" {
		t.Errorf("after cp, st is %s, want stopped again", st)
	}

	in := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(in, []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.ok("cp", in, "st:/data/in")
	// Through the planted link to a host directory: the guest's path, made
	// in the guest, never the host's.
	e.krunbox("cp", in, "st:/data/evil/planted")
	if entries, _ := os.ReadDir(hostDir); len(entries) != 1 {
		t.Errorf("the host directory a guest link names holds %d entries, want only its own secret", len(entries))
	}
	if st := e.ls()["st"].State; st != "stopped" {
		t.Errorf("after cp, st is %s, want stopped again", st)
	}
	e.ok("start", "st")
	if got := e.ok("exec", "st", "cat", "/data/in"); got != "from the host\n" {
		t.Errorf("a file copied into a stopped sandbox: %q", got)
	}
}

// testCopyTar copies to stdout as a tar stream, and from one on stdin, as
// docker cp does with -.
func testCopyTar(t *testing.T, e *env) {
	e.started("tt")
	e.ok("exec", "tt", "sh", "-c", "mkdir -p /t/sub && echo one > /t/sub/f && ln -s sub/f /t/link")
	r := e.krunbox("cp", "tt:/t", "-")
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	got := map[string]string{}
	tr := tar.NewReader(strings.NewReader(r.stdout))
	for {
		hdr, err := tr.Next()
		if err != nil {
			if err != io.EOF {
				t.Fatalf("cp tt:/t -: %v", err)
			}
			break
		}
		body, _ := io.ReadAll(tr)
		got[hdr.Name] = string(hdr.Typeflag) + ":" + string(body) + hdr.Linkname
	}
	want := map[string]string{"t/": "5:", "t/sub/": "5:", "t/sub/f": "0:one\n", "t/link": "2:sub/f"}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("cp tt:/t -: %s is %q, want %q (all: %q)", name, got[name], w, got)
		}
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct{ name, body string }{{"dir/", ""}, {"dir/file", "from tar\n"}} {
		hdr := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg}
		if strings.HasSuffix(f.name, "/") {
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		}
		tw.WriteHeader(hdr)
		tw.Write([]byte(f.body))
	}
	tw.Close()
	if r := e.krunboxIn(buf.Bytes(), "cp", "-", "tt:/tmp"); r.code != 0 {
		t.Fatalf("%s", r)
	}
	if got := e.ok("exec", "tt", "cat", "/tmp/dir/file"); got != "from tar\n" {
		t.Errorf("cp - tt:/tmp: /tmp/dir/file holds %q", got)
	}
	buf.Reset()
	tw = tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "../escape", Mode: 0o644, Typeflag: tar.TypeReg})
	tw.Close()
	checkKrunboxError(t, e.krunboxIn(buf.Bytes(), "cp", "-", "tt:/tmp"), "leaves the destination")
}
