package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/krunbox/krunbox/internal/testutil/poll"
	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/internal/testutil/testkrun"
	"github.com/krunbox/krunbox/internal/testutil/victim"
)

// hostileCase is one way a guest, an image or a project tries to reach
// the host through krunbox's host-side code. Each runs in an installation
// of its own, next to a victim directory that nothing shares; the victim
// must be byte-for-byte unchanged after the case.
type hostileCase struct {
	name string
	run  func(t *testing.T, e *env, victim string)
}

var hostileCases = []hostileCase{
	{"ImageKrunboxDirIsALink", testImageKrunboxLink},
	{"GuestKrunboxDirIsALink", testGuestKrunboxLink},
	{"ShareSwappedForALink", testShareSwapped},
	{"CopyInDoesNotFollowLinks", testCopyInLinks},
	{"CopyOutDoesNotFollowLinks", testCopyOutLinks},
	{"BadImageEnv", testBadImageEnv},
	{"OwnDirectoryBehindALink", testOwnDirBehindLink},
	{"HugeAndBlockingGitFiles", testHostileGitFiles},
	{"ExportDropsSetID", testExportSetID},
	{"JunkEverywhere", testJunkEverywhere},
	{"ServeProjectImageAndJunk", testServeHostile},
}

// testHostBoundary runs every hostile case.
func testHostBoundary(t *testing.T, e *env) {
	for _, c := range hostileCases {
		t.Run(c.name, func(t *testing.T) {
			v := victim.New(t)
			// Checked last, after the sandboxes were removed, and
			// whether the case ended early or not.
			t.Cleanup(func() { v.Check(t, "after the case") })
			c.run(t, newEnv(t, e.suite), v.Path)
		})
	}
}

// within runs krunbox with a deadline: a hostile file must never make
// krunbox hang. It reports the peak memory krunbox used too.
func (e *env) within(d time.Duration, args ...string) (result, int64) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), poll.Scaled(d))
	defer cancel()
	cmd := exec.CommandContext(ctx, krunboxBin, args...)
	cmd.Env = e.environ()
	// A VM runner that krunbox started may hold its output open: past the
	// deadline, stop waiting for it too.
	cmd.WaitDelay = 5 * time.Second
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := result{args: args, stdout: out.String(), stderr: errOut.String()}
	if ctx.Err() != nil {
		e.t.Fatalf("krunbox %s did not finish within %v: %s", strings.Join(args, " "), d, r)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("krunbox %v: %v", args, err)
	}
	var maxRSS int64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		maxRSS = ru.Maxrss << 10
	}
	return r, maxRSS
}

// derivedImage writes the test image with one more layer and a changed
// configuration into an OCI layout of its own and returns its reference.
func derivedImage(t *testing.T, entries []testimage.Entry, cfg func(*testimage.Config)) string {
	t.Helper()
	dir, tag, ok := strings.Cut(strings.TrimPrefix(image, "oci:"), ":")
	if !ok || !strings.HasPrefix(image, "oci:") {
		t.Skipf("the hostile images derive from an oci: test image, not %s", image)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(im.Manifests, func(d v1.Descriptor) bool { return d.Annotations["org.opencontainers.image.ref.name"] == tag })
	if i < 0 {
		t.Fatalf("%s has no image tagged %s", dir, tag)
	}
	base, err := idx.Image(im.Manifests[i].Digest)
	if err != nil {
		t.Fatal(err)
	}
	img := base
	if len(entries) > 0 {
		if img, err = mutate.AppendLayers(img, testimage.Layer(t, entries...)); err != nil {
			t.Fatal(err)
		}
	}
	if cfg != nil {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config.DeepCopy()
		cfg(c)
		if img, err = mutate.Config(img, *c); err != nil {
			t.Fatal(err)
		}
	}
	dir = filepath.Join(t.TempDir(), "hostile")
	testimage.WriteLayout(t, dir, "latest", img)
	return "oci:" + dir + ":latest"
}

// workspace returns a new directory with symlinks resolved.
func workspace(t *testing.T) string {
	t.Helper()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// An image whose /.krunbox is a link to a host directory: krunbox writes
// its agent and configuration there at every start. It owns /.krunbox: a
// link there is replaced, nothing is written through it, and the sandbox
// runs.
func testImageKrunboxLink(t *testing.T, e *env, victim string) {
	for _, target := range []string{victim, "../../../../../../../../../../.." + victim} {
		img := derivedImage(t, []testimage.Entry{testimage.Symlink(".krunbox", target)}, nil)
		r, _ := e.within(2*time.Minute, "run", "--rm", img, "--", "hostname")
		if r.code != 0 {
			t.Errorf("an image with /.krunbox -> %s: %s", target, r)
		}
	}
}

// A guest that replaces /.krunbox with a link to a host directory, then
// is stopped and started again. libkrun 1.19 serves /.krunbox from memory,
// read-only; before it (the double built as an older libkrun), krunbox
// writes the agent into the root, where the guest can plant the link.
func testGuestKrunboxLink(t *testing.T, e *env, victim string) {
	if e.suite.mode != double {
		t.Skip("needs a libkrun before 1.19: the test double built as one")
	}
	e.extra = append(e.extra, "KRUNBOX_LIBKRUN="+testkrun.Build(t, "-DTESTKRUN_LEGACY"))
	e.started("g")
	e.ok("exec", "g", "sh", "-c", "rm -rf /.krunbox; ln -s "+victim+" /.krunbox")
	e.ok("stop", "g")
	if r, _ := e.within(2*time.Minute, "start", "g"); r.code != 0 {
		t.Fatalf("start after the guest planted /.krunbox -> %s: %s", victim, r)
	}
	if out := e.ok("exec", "g", "hostname"); strings.TrimSpace(out) != "g" {
		t.Errorf("hostname after the restart: %q", out)
	}
}

// A guest that swaps a shared directory inside the workspace for a link
// to a host directory (or to krunbox's own state) between two starts.
func testShareSwapped(t *testing.T, e *env, victim string) {
	for i, target := range []string{victim, filepath.Join(e.home, "state")} {
		name := fmt.Sprintf("s%d", i)
		ws := workspace(t)
		data := filepath.Join(ws, "data")
		if err := os.Mkdir(data, 0o755); err != nil {
			t.Fatal(err)
		}
		e.started(name, "--workspace", ws, "-v", data+":/data")
		e.ok("exec", name, "sh", "-c", "rm -rf "+data+" && ln -s "+target+" "+data)
		e.ok("stop", name)
		r, _ := e.within(2*time.Minute, "start", name)
		if r.code == 0 {
			// Started: /data must not be the link's target.
			out := e.krunbox("exec", name, "sh", "-c", "ls -a /data; echo pwned > /data/pwned")
			t.Errorf("start after %s became a link to %s: started, /data holds %q", data, target, out.stdout)
			continue
		}
		if r.code != 125 || !strings.Contains(r.stderr, data+": changed since the sandbox was created") || !strings.Contains(r.stderr, "krunbox rm "+name) {
			t.Errorf("start after the guest replaced the share %s by a link: %s; want a refusal naming the share, with a hint to recreate the sandbox", data, r)
		}
		if st := e.ls()[name].State; st != "stopped" {
			t.Errorf("a refused start left %s %s, want stopped", name, st)
		}
	}
}

// plantJunk puts into dir what a guest can make: links out of the tree
// (absolute and relative), a FIFO, a unix socket, a sparse file, a name
// with a newline. It returns a cleanup closing the socket.
func plantJunk(t *testing.T, dir, victim string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "plain"), []byte("plain\n"), 0o644))
	must(os.Symlink(victim, filepath.Join(dir, "abs")))
	must(os.Symlink(strings.Repeat("../", 32)+strings.TrimPrefix(victim, "/"), filepath.Join(dir, "rel")))
	must(os.Symlink(filepath.Join(victim, "secret"), filepath.Join(dir, "secretlink")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	f, err := os.Create(filepath.Join(dir, "sparse"))
	must(err)
	must(f.Truncate(2 << 30))
	f.Close()
	must(os.WriteFile(filepath.Join(dir, "new\nline"), []byte("nl\n"), 0o644))
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "sock"), Net: "unix"})
	must(err)
	l.SetUnlinkOnClose(false)
	t.Cleanup(func() { l.Close() })
}

// krunbox cp of a host tree holding links out of it, a FIFO, a socket: the
// links are copied as links, nothing is read through them, nothing blocks.
func testCopyInLinks(t *testing.T, e *env, victim string) {
	ws := workspace(t)
	src := filepath.Join(ws, "tree")
	plantJunk(t, src, victim)
	if err := os.Remove(filepath.Join(src, "sparse")); err != nil { // 2 GiB through the agent: not this test's point
		t.Fatal(err)
	}
	e.started("c", "--workspace", ws)
	if r, _ := e.within(time.Minute, "cp", src, "c:/tmp/in"); r.code != 0 {
		t.Logf("cp of a tree with FIFOs and sockets: %s", r)
	}
	out := e.krunbox("exec", "c", "sh", "-c", "cd /tmp/in && for f in abs rel secretlink; do test -L $f && echo $f link; done; cat plain; grep -r victim . 2>/dev/null; true")
	if want := "abs link\nrel link\nsecretlink link\nplain\n"; out.stdout != want {
		t.Errorf("copied into the guest:\n%s\nwant:\n%s", out.stdout, want)
	}
}

// krunbox cp out of the guest into a host directory in which the guest
// made links: nothing is written through them.
func testCopyOutLinks(t *testing.T, e *env, victim string) {
	ws := workspace(t)
	e.started("o", "--workspace", ws)
	e.ok("exec", "o", "sh", "-c", strings.Join([]string{
		"mkdir -p /src/sub " + ws + "/dst",
		"echo pwned > /src/secret; echo pwned > /src/sub/authorized_keys; echo pwned > /src/agent.json",
		"ln -s " + victim + " " + ws + "/out",
		"ln -s " + victim + " " + ws + "/dst/src",
		"ln -s " + victim + "/.ssh " + ws + "/dst/sub",
		"ln -s " + victim + "/secret " + ws + "/dst/secret",
	}, " && "))
	for _, args := range [][]string{
		{"cp", "o:/src/secret", ws + "/out/"},
		{"cp", "o:/src/secret", ws + "/out"},
		{"cp", "o:/src", ws + "/out"},
		{"cp", "o:/src", ws + "/dst"},
		{"cp", "o:/src/.", ws + "/dst/src"},
		{"cp", "o:/src/secret", ws + "/dst/secret"},
	} {
		e.within(time.Minute, args...)
	}
}

// An image whose configuration holds an environment entry without "=":
// the sandbox gets its workspace and the image's user anyway, or is
// refused; never started silently without them.
func testBadImageEnv(t *testing.T, e *env, victim string) {
	img := derivedImage(t, nil, func(c *testimage.Config) {
		c.Env = append(c.Env, "NOEQ")
		c.User = "65534"
	})
	ws := workspace(t)
	if err := os.Chmod(ws, 0o777); err != nil { // for the image's user
		t.Fatal(err)
	}
	r, _ := e.within(2*time.Minute, "run", "--rm", "--workspace", ws, img, "--", "sh", "-c", "id -u > "+ws+"/uid")
	if r.code == 125 {
		if !strings.Contains(r.stderr, "NOEQ") {
			t.Errorf("a refused image does not say which entry: %s", r)
		}
		return
	}
	if b, err := os.ReadFile(filepath.Join(ws, "uid")); err != nil || string(b) != "65534\n" {
		t.Errorf("with an env entry NOEQ in the image, the guest's workspace write gave %q, %v (want the image's user 65534, through the workspace)", b, err)
	}
}

// krunbox's configuration directory is a link to a directory that does
// not exist yet: a workspace holding where it points is refused.
func testOwnDirBehindLink(t *testing.T, e *env, victim string) {
	elsewhere := workspace(t)
	if err := os.Symlink(filepath.Join(elsewhere, "config"), filepath.Join(e.home, "config")); err != nil {
		t.Fatal(err)
	}
	e.pull()
	r, _ := e.within(time.Minute, "create", "--name", "w", "--workspace", elsewhere, image)
	if r.code == 0 {
		t.Errorf("a workspace holding krunbox's configuration directory (behind a link, not made yet) was accepted: %s", r)
	}
}

// A workspace whose .git is a 2 GiB sparse file or a FIFO: create and start
// neither hang nor read it whole.
func testHostileGitFiles(t *testing.T, e *env, victim string) {
	e.pull()
	for i, plant := range []func(p string) error{
		func(p string) error {
			f, err := os.Create(p)
			if err == nil {
				err = f.Truncate(2 << 30)
				f.Close()
			}
			return err
		},
		func(p string) error { return syscall.Mkfifo(p, 0o644) },
		func(p string) error { return os.WriteFile(p, []byte("gitdir: "+victim+"\n"), 0o644) },
	} {
		ws := workspace(t)
		if err := plant(filepath.Join(ws, ".git")); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("git%d", i)
		r, rss := e.within(time.Minute, "create", "--name", name, "--workspace", ws, image)
		if rss > 256<<20 {
			t.Errorf("create with a hostile .git used %d MiB", rss>>20)
		}
		if r.code != 0 {
			continue
		}
		r, rss = e.within(2*time.Minute, "start", name)
		if rss > 256<<20 {
			t.Errorf("start with a hostile .git used %d MiB", rss>>20)
		}
		if r.code == 0 {
			if out := e.krunbox("exec", name, "ls", victim); out.code == 0 {
				t.Errorf("the guest sees %s through the workspace's .git: %s", victim, out.stdout)
			}
		}
	}
}

// krunbox export as root of an image holding a set-id root file.
func testExportSetID(t *testing.T, e *env, victim string) {
	if os.Geteuid() != 0 {
		t.Skip("export keeps owners, and so set-id bits, only as root")
	}
	img := derivedImage(t, []testimage.Entry{testimage.File("usr/bin/su-pwn", "#!/bin/sh\n", 0o6755, testimage.Owner(0, 0))}, nil)
	e.ok("pull", img)
	dst := filepath.Join(t.TempDir(), "rootfs")
	e.ok("export", img, dst)
	fi, err := os.Stat(filepath.Join(dst, "usr/bin/su-pwn"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
		t.Errorf("exported set-id root file has mode %v", fi.Mode())
	}
	dst2 := filepath.Join(t.TempDir(), "rootfs")
	e.ok("export", "--keep-setid", img, dst2)
	if fi, err := os.Stat(filepath.Join(dst2, "usr/bin/su-pwn")); err != nil || fi.Mode()&fs.ModeSetuid == 0 {
		t.Errorf("export --keep-setid: %v, %v", fi.Mode(), err)
	}
}

// Junk in the workspace and the root, planted by the guest and by the
// repository, through every host-side operation on the sandbox: stop,
// start, logs, cp both ways, rm. Nothing hangs, nothing outside is
// touched, rm leaves the workspace alone.
func testJunkEverywhere(t *testing.T, e *env, victim string) {
	ws := workspace(t)
	plantJunk(t, filepath.Join(ws, "junk"), victim)
	e.started("j", "--workspace", ws)
	e.ok("exec", "j", "sh", "-c", strings.Join([]string{
		"mkdir -p /junk " + ws + "/gjunk",
		"for d in /junk " + ws + "/gjunk; do ln -s " + victim + " $d/abs; ln -s ../../../../../../.." + victim + " $d/rel; mkfifo $d/fifo; truncate -s 2G $d/sparse; echo nl > \"$d/new\nline\"; ln $d/sparse $d/hard; done",
		"ln -s " + victim + " /victim-link",
		"printf 'console junk \\033[2J\\n' > /dev/console || true",
	}, " && "))
	steps := [][]string{
		{"stop", "j"},
		{"start", "j"},
		{"logs", "j"},
		{"cp", "j:/junk/abs", filepath.Join(t.TempDir(), "out")},
		{"cp", "j:" + ws + "/gjunk/new\nline", filepath.Join(t.TempDir(), "nl")},
		{"cp", filepath.Join(ws, "gjunk", "abs"), "j:/tmp/abs"},
		{"inspect", "j"},
		{"ls"},
		{"rm", "-f", "j"},
	}
	for _, args := range steps {
		e.within(2*time.Minute, args...)
	}
	for _, p := range []string{"junk/abs", "junk/fifo", "gjunk/abs", "gjunk/sparse"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err != nil {
			t.Errorf("after rm, the workspace's %s: %v", p, err)
		}
	}
}

// serveSession is a krunbox serve --stdio a test talks JSON-RPC to.
type serveSession struct {
	t    *testing.T
	in   *json.Encoder
	out  chan map[string]any
	next int
}

// serve starts krunbox serve --stdio in dir, stopped when the test ends.
func (e *env) serve(t *testing.T, dir string) *serveSession {
	t.Helper()
	cmd := e.command("serve", "--stdio")
	cmd.Dir = dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	done := startCmd(t, cmd)
	t.Cleanup(func() {
		stdin.Close()
		exitOf(t, done, time.Minute, "krunbox serve")
	})
	s := &serveSession{t: t, in: json.NewEncoder(stdin), out: make(chan map[string]any, 64)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				s.out <- m
			}
		}
		close(s.out)
	}()
	return s
}

// call sends a request and returns its response's result or error,
// skipping notifications, within d.
func (s *serveSession) call(d time.Duration, method string, params any) (result, rpcErr map[string]any) {
	s.t.Helper()
	s.next++
	id := s.next
	if err := s.in.Encode(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}); err != nil {
		s.t.Fatalf("%s: %v", method, err)
	}
	deadline := time.After(poll.Scaled(d))
	for {
		select {
		case m, ok := <-s.out:
			if !ok {
				s.t.Fatalf("%s: krunbox serve exited", method)
			}
			if got, _ := m["id"].(float64); int(got) != id {
				continue
			}
			r, _ := m["result"].(map[string]any)
			er, _ := m["error"].(map[string]any)
			return r, er
		case <-deadline:
			s.t.Fatalf("%s: no answer within %v", method, d)
		}
	}
}

// A project (the pi extension's workspace) naming, as its image, an OCI
// layout of its own with /.krunbox -> victim, relative to the project; then
// a project whose .git is a FIFO and that holds junk, through serve's calls.
func testServeHostile(t *testing.T, e *env, victim string) {
	ws := workspace(t)
	img := derivedImage(t, []testimage.Entry{testimage.Symlink(".krunbox", victim)}, nil)
	layoutDir := strings.TrimSuffix(strings.TrimPrefix(img, "oci:"), ":latest")
	if err := os.Rename(layoutDir, filepath.Join(ws, "img")); err != nil {
		t.Fatal(err)
	}
	s := e.serve(t, ws)
	if _, rpcErr := s.call(10*time.Second, "initialize", map[string]any{"protocolVersion": 1}); rpcErr != nil {
		t.Fatalf("initialize: %v", rpcErr)
	}
	_, rpcErr := s.call(2*time.Minute, "sandbox.ensure", map[string]any{
		"name": "repo-image", "workspace": ws, "config": map[string]any{"image": "oci:img:latest", "cpus": 1},
	})
	if rpcErr == nil {
		t.Errorf("serve started a sandbox from an image inside the project, named by a relative oci: path")
	}

	plantJunk(t, filepath.Join(ws, "junk"), victim)
	if err := syscall.Mkfifo(filepath.Join(ws, ".git"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.pull()
	ensure := func() (map[string]any, map[string]any) {
		return s.call(2*time.Minute, "sandbox.ensure", map[string]any{
			"name": "junk", "workspace": ws, "config": map[string]any{"image": image, "imageTrusted": true, "cpus": 1},
		})
	}
	// A FIFO for .git: answered (started, or refused), never hung on.
	if _, rpcErr := ensure(); rpcErr != nil {
		t.Logf("sandbox.ensure of a project with a FIFO .git: %v", rpcErr)
	}
	if err := os.Remove(filepath.Join(ws, ".git")); err != nil {
		t.Fatal(err)
	}
	res, rpcErr := ensure()
	if rpcErr != nil || res["state"] != "ready" {
		t.Fatalf("sandbox.ensure: %v %v", res, rpcErr)
	}
	for _, c := range []struct {
		method string
		params map[string]any
	}{
		{"fs.readFile", map[string]any{"path": ws + "/junk/abs/secret"}},
		{"fs.readFile", map[string]any{"path": ws + "/junk/fifo"}},
		{"fs.readFile", map[string]any{"path": ws + "/junk/sparse", "offset": 1 << 30}},
		{"fs.writeFile", map[string]any{"path": ws + "/junk/abs/pwned", "data": "cHduZWQ="}},
		{"fs.writeFile", map[string]any{"path": ws + "/junk/secretlink", "data": "cHduZWQ="}},
		{"fs.readDir", map[string]any{"path": ws + "/junk/abs"}},
		{"fs.stat", map[string]any{"path": ws + "/junk/sparse"}},
	} {
		c.params["sandbox"] = "junk"
		res, rpcErr := s.call(time.Minute, c.method, c.params)
		if rpcErr == nil && c.method == "fs.readFile" && res["data"] == "dGhlIHZpY3RpbSdzIHNlY3JldAo=" {
			t.Errorf("%s %v read the victim: %v", c.method, c.params["path"], res)
		}
	}
}
