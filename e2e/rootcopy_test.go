package e2e

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/testimage"
)

// testCopyRoot: a sandbox whose root is its own copy of the image (the
// fallback where the host cannot mount an overlay, forced here by the
// configuration and by --root) keeps its changes across stop and start,
// never in the image cache nor in another sandbox, and goes with rm.
func testCopyRoot(t *testing.T, e *env) {
	e.pull()
	var imgs []struct{ Rootfs string }
	if err := json.Unmarshal([]byte(e.ok("images", "--json")), &imgs); err != nil || len(imgs) != 1 {
		t.Fatalf("images --json: %v %v", imgs, err)
	}
	before := testimage.ReadTree(t, imgs[0].Rootfs)

	e.extra = append(e.extra, "KRUNBOX_ROOT=copy")
	e.ok("create", "--name", "copied", image)
	e.extra = e.extra[:len(e.extra)-1]
	root, _ := e.inspect("copied")["root"].(map[string]any)
	if root["kind"] != "copy" || root["reason"] == "" {
		t.Fatalf("inspect: root %v, want a copy with its reason", root)
	}
	r := e.krunbox("start", "copied")
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	// A plain copy warns, saying why and what it costs; a clone does not.
	if strings.Contains(r.stderr, "level=WARN") && (!strings.Contains(r.stderr, "root file system copied") || !strings.Contains(r.stderr, `why="a copy was asked for"`)) {
		t.Errorf("start's warning: %q", r.stderr)
	}
	dir := e.sandboxDir("copied")
	if _, err := os.Stat(filepath.Join(dir, "rootfs", "bin")); err != nil {
		t.Errorf("no copy in the sandbox's directory: %v", err)
	}

	e.ok("exec", "copied", "sh", "-c", "echo kept > /root/x; echo more >> /etc/passwd; rm /bin/ls")
	e.ok("stop", "copied")
	e.ok("start", "copied")
	if got := e.ok("exec", "copied", "sh", "-c", "cat /root/x; tail -n 1 /etc/passwd; test -e /bin/ls || echo no-ls"); got != "kept\nmore\nno-ls\n" {
		t.Errorf("root after stop and start: %q", got)
	}
	for _, d := range testimage.CompareTrees(before, testimage.ReadTree(t, imgs[0].Rootfs), true, true) {
		t.Error("image cache changed: " + d)
	}
	e.ok("create", "--name", "other", "--root", "copy", image)
	e.ok("start", "other")
	if got := e.ok("exec", "other", "sh", "-c", "test -e /root/x && echo x; tail -n 1 /etc/passwd; test -e /bin/ls && echo ls"); got != "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\nls\n" {
		t.Errorf("another sandbox sees the first one's changes: %q", got)
	}

	e.ok("rm", "-f", "copied")
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the sandbox's directory, with its copy, is left: %v", err)
	}
}
