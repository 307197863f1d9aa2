package e2e

import (
	"bytes"
	"crypto/md5"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/testutil/poll"
	"github.com/krunbox/krunbox/internal/testutil/syncbuf"
)

func testCopy(t *testing.T, e *env) {
	e.started("files")
	src := filepath.Join(t.TempDir(), "tree")
	big := bytes.Repeat([]byte("krunbox "), 1<<18) // 2 MiB, several frames
	for p, c := range map[string]struct {
		data string
		mode fs.FileMode
	}{
		"tree/a.sh":        {"#!/bin/sh\necho a\n", 0o750},
		"tree/sub/b.txt":   {"b", 0o640},
		"tree/sub/big.bin": {string(big), 0o600},
	} {
		full := filepath.Join(filepath.Dir(src), p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(c.data), c.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(full, c.mode)
	}
	os.Symlink("sub/b.txt", filepath.Join(src, "link"))
	os.Chmod(filepath.Join(src, "sub"), 0o711)

	// Host to guest, into an existing directory.
	e.ok("cp", src, "files:/root")
	out := e.ok("exec", "files", "sh", "-c", "cd /root/tree && stat -c '%n %a' a.sh sub sub/b.txt sub/big.bin && md5sum < sub/big.bin && readlink link && ./a.sh")
	want := fmt.Sprintf("a.sh 750\nsub 711\nsub/b.txt 640\nsub/big.bin 600\n%x  -\nsub/b.txt\na\n", md5.Sum(big))
	if out != want {
		t.Errorf("copied into the guest:\n%s\nwant:\n%s", out, want)
	}
	// Guest to host, under a new name; and a single file onto a file.
	e.ok("exec", "files", "sh", "-c", "mkdir -p /srv/out && echo guest > /srv/out/g && chmod 4755 /srv/out/g && ln -s /etc/passwd /srv/out/abs")
	dst := filepath.Join(t.TempDir(), "copy")
	e.ok("cp", "files:/srv/out", dst)
	if b, err := os.ReadFile(filepath.Join(dst, "g")); err != nil || string(b) != "guest\n" {
		t.Errorf("copied out: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "g")); err != nil || fi.Mode() != 0o755 {
		t.Errorf("mode of a setuid guest file copied out: %v, %v; want 0755 (setuid dropped)", fi.Mode(), err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "abs")); err != nil || target != "/etc/passwd" {
		t.Errorf("a guest symlink copied out: %q, %v; want the link itself", target, err)
	}
	e.ok("cp", "files:/root/tree/sub/big.bin", filepath.Join(dst, "g"))
	if b, err := os.ReadFile(filepath.Join(dst, "g")); err != nil || !bytes.Equal(b, big) {
		t.Errorf("a file copied out onto a file: %d bytes, %v", len(b), err)
	}
	// Errors name what failed and lose nothing.
	r := e.krunbox("cp", "files:/no/such", dst)
	if r.code != 125 || !strings.Contains(r.stderr, "/no/such") {
		t.Errorf("cp of a missing guest file: %s", r)
	}
	checkKrunboxError(t, e.krunbox("cp", src, dst), "NAME:PATH")
	// A DST that is a symbolic link is refused, never followed.
	victim := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{link, link + "/"} {
		checkKrunboxError(t, e.krunbox("cp", "files:/srv/out", d), "symbolic link")
	}
	if entries, err := os.ReadDir(victim); err != nil || len(entries) != 0 {
		t.Errorf("cp wrote through a symbolic link at DST: %v, %v", entries, err)
	}
}

func testLogs(t *testing.T, e *env) {
	e.started("logged")
	if out := e.ok("logs", "logged"); !strings.Contains(out, "ready") {
		t.Errorf("the console has no agent ready line:\n%s", out)
	}
	// -f follows until the VM stops.
	cmd := e.command("logs", "-f", "logged")
	var out syncbuf.Buffer
	cmd.Stdout = &out
	done := startCmd(t, cmd)
	poll.Until(t, "logs -f to print the console", 30*time.Second, func() bool { return strings.Contains(out.String(), "ready") })
	select {
	case code := <-done:
		t.Fatalf("logs -f ended (exit %d) while the VM runs", code)
	default:
	}
	e.ok("stop", "logged")
	if code := exitOf(t, done, 30*time.Second, "logs -f after the VM stopped"); code != 0 {
		t.Errorf("logs -f: exit %d", code)
	}
}

func testInspect(t *testing.T, e *env) {
	ws, _ := filepath.EvalSymlinks(t.TempDir())
	e.started("seen", "--workspace", ws, "--cpus", "3", "-e", "A=1", "--label", "team=x")
	v := e.inspect("seen")
	cfg := v["config"].(map[string]any)
	status := v["status"].(map[string]any)
	paths := v["paths"].(map[string]any)
	img := v["image"].(map[string]any)
	if v["name"] != "seen" || cfg["cpus"] != 3.0 || cfg["workspace"] != ws || cfg["labels"].(map[string]any)["team"] != "x" {
		t.Errorf("inspect config: %v", v)
	}
	if status["state"] != "running" || status["pid"] == nil || status["agent"] == nil {
		t.Errorf("inspect status: %v", status)
	}
	if !strings.HasPrefix(img["digest"].(string), "sha256:") || img["ref"] != image {
		t.Errorf("inspect image: %v", img)
	}
	if fi, err := os.Stat(paths["socket"].(string)); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Errorf("inspect socket path %v: %v", paths["socket"], err)
	}
	if paths["dir"] != e.sandboxDir("seen") {
		t.Errorf("inspect dir: %v", paths["dir"])
	}
}
