package gitprotect

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/krunbox/krunbox/hostapi/vmm"
)

// A fingerprint sees every change the guest can make to a protected path,
// opens nothing that could block, follows no symlink, and is bounded.
func TestFingerprint(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	makeTree(t, dir, map[string]string{".git/config": "[core]\n", ".git/hooks/a": "#!/bin/sh\n", "elsewhere/a": "#!/bin/sh\n"})
	g := filepath.Join(dir, ".git")
	paths := []vmm.Protect{{Path: g, Writable: true}, {Path: filepath.Join(g, "config")}, {Path: filepath.Join(g, "hooks")}}
	base, err := fingerprint(paths)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name   string
		change func()
		want   string
	}{
		{"same size, other content", func() { os.WriteFile(filepath.Join(g, "hooks/a"), []byte("#!/bin/zz\n"), 0o644) }, "hooks/a"},
		{"mode", func() { os.Chmod(filepath.Join(g, "hooks/a"), 0o755) }, "hooks/a"},
		{"new symlink", func() { os.Symlink("/bin/true", filepath.Join(g, "hooks/post-checkout")) }, "hooks/post-checkout"},
		{"FIFO", func() { syscall.Mkfifo(filepath.Join(g, "hooks/fifo"), 0o644) }, "hooks/fifo"},
		{"config", func() { os.WriteFile(filepath.Join(g, "config"), []byte("[core]\n\tfsmonitor = x\n"), 0o644) }, "config"},
		{"hooks replaced by a symlink", func() {
			os.RemoveAll(filepath.Join(g, "hooks"))
			os.Symlink("../elsewhere", filepath.Join(g, "hooks"))
		}, "hooks"},
		{".git replaced by a symlink to a copy", func() {
			os.Rename(g, filepath.Join(dir, "copy"))
			os.Symlink("copy", g)
		}, ".git"},
	}
	for _, st := range steps {
		st.change()
		now, err := fingerprint(paths)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if diff := fingerprintDiff(base, now); !slices.Contains(diff, filepath.Join(g, st.want)) && !(st.want == ".git" && slices.Contains(diff, g)) {
			t.Errorf("%s: changes %q, want %s among them", st.name, diff, st.want)
		}
		base = now
	}

	many := filepath.Join(dir, "many")
	os.Mkdir(many, 0o755)
	for i := range maxFingerprintEntries + 1 {
		os.WriteFile(filepath.Join(many, strconv.Itoa(i)), nil, 0o644)
	}
	if _, err := fingerprint([]vmm.Protect{{Path: many}}); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("fingerprint of %d entries: %v, want a bound", maxFingerprintEntries+1, err)
	}
}

// Protect plans the paths and notes the shares with no .git; where the
// runner cannot mount them, it fingerprints them, and Changed sees what
// the guest changed until it is accepted. The state reads back as it was
// written.
func TestProtect(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	makeTree(t, dir, map[string]string{"ws/.git/HEAD": "x", "ws/.git/config": "", "ws/.git/hooks/": "", "plain/f": "x"})
	ws, plain := filepath.Join(dir, "ws"), filepath.Join(dir, "plain")
	want := []string{"ws/.git (pinned)", "ws/.git/config", "ws/.git/hooks"}
	st, err := Protect([]string{ws, plain}, true)
	if err != nil || st.Mode != ModeMounts || st.Fingerprint != nil || !slices.Equal(protects(dir, st.Paths), want) || !slices.Equal(st.Absent, []string{filepath.Join(plain, ".git")}) {
		t.Fatalf("Protect with mounts = %+v, %v; want %q mounted, plain/.git absent", st, err, want)
	}
	if ch, err := st.Changed(); err != nil || ch != nil {
		t.Errorf("Changed with mounts = %q, %v; want nothing compared", ch, err)
	}
	if got := st.Appeared(); len(got) != 0 {
		t.Errorf("Appeared before the guest made a .git: %q", got)
	}
	if err := os.Mkdir(filepath.Join(plain, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := st.Appeared(); !slices.Equal(got, []string{filepath.Join(plain, ".git")}) {
		t.Errorf("Appeared after the guest made a .git: %q", got)
	}

	st, err = Protect([]string{ws}, false)
	if err != nil || st.Mode != ModeFingerprint || len(st.Fingerprint) == 0 || !slices.Equal(protects(dir, st.Paths), want) {
		t.Fatalf("Protect without mounts = %+v, %v; want %q fingerprinted", st, err, want)
	}
	if ch, err := st.Changed(); err != nil || len(ch) != 0 {
		t.Fatalf("Changed before any change = %q, %v", ch, err)
	}
	hook := filepath.Join(ws, ".git/hooks/pre-commit")
	if err := os.WriteFile(hook, []byte("echo pwned\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sd := t.TempDir()
	if err := st.Write(sd); err != nil {
		t.Fatal(err)
	}
	back, err := ReadState(sd)
	if err != nil || !reflect.DeepEqual(back, st) {
		t.Fatalf("ReadState = %+v, %v; want %+v", back, err, st)
	}
	if ch, err := back.Changed(); err != nil || !slices.Equal(ch, []string{hook}) {
		t.Errorf("Changed after the guest wrote a hook = %q, %v", ch, err)
	}
	if err := back.Accept(); err != nil {
		t.Fatal(err)
	}
	if ch, err := back.Changed(); err != nil || len(ch) != 0 {
		t.Errorf("Changed once accepted = %q, %v", ch, err)
	}

	if st, err := ReadState(t.TempDir()); st != nil || err != nil {
		t.Errorf("ReadState of a sandbox never started = %+v, %v", st, err)
	}
	os.WriteFile(filepath.Join(sd, stateFile), []byte("{"), 0o600)
	if _, err := ReadState(sd); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("ReadState of a damaged state: %v", err)
	}
}
