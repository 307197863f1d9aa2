package flatten

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/testimage"
)

func applyAll(t *testing.T, root string, opts Options, layers [][]testimage.Entry) (Stats, error) {
	t.Helper()
	a, err := NewApplier(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, l := range layers {
		if err := a.ApplyLayer(t.Context(), bytes.NewReader(testimage.Tar(t, l...))); err != nil {
			return a.Stats(), err
		}
	}
	return a.Stats(), nil
}

func newRoot(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

func checkRules(t *testing.T, root string, want map[string]testimage.Node, checkOwner bool) {
	t.Helper()
	got := testimage.ReadTree(t, root)
	for _, d := range testimage.CompareTrees(want, got, checkOwner, true) {
		t.Error(d)
	}
	if got["lower"].Inode != got["upper-link"].Inode {
		t.Errorf("upper-link is not a hard link to the lower-layer file lower")
	}
}

func TestApplyRulesAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to apply ownership (CI runs as root); the rootless tests cover the rest")
	}
	root := newRoot(t)
	st, err := applyAll(t, root, Options{}, testimage.RuleLayers())
	if err != nil {
		t.Fatal(err)
	}
	checkRules(t, root, testimage.WantRules(), true)
	if st.Hardlinks != 4 || st.Whiteouts != 8 {
		t.Errorf("stats %+v: want 4 hard links and 8 whiteouts", st)
	}
}

func TestApplyRulesRootlessMode(t *testing.T) {
	root := newRoot(t)
	if _, err := applyAll(t, root, Options{Rootless: true}, testimage.RuleLayers()); err != nil {
		t.Fatal(err)
	}
	checkRules(t, root, testimage.RootlessView(testimage.WantRules(), os.Geteuid(), os.Getegid()), true)
}

// TestApplyRulesUnprivileged runs the flattener as an unprivileged user for
// real: as root, it re-executes this test binary as nobody.
func TestApplyRulesUnprivileged(t *testing.T) {
	if dir := os.Getenv("FLATTEN_TEST_UNPRIVILEGED_ROOT"); dir != "" {
		if _, err := applyAll(t, dir, Options{Rootless: os.Geteuid() != 0}, testimage.RuleLayers()); err != nil {
			t.Fatal(err)
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to an unprivileged user (TestApplyRulesRootlessMode covers this user)")
	}
	const uid, gid = 65534, 65534
	work, err := os.MkdirTemp("", "flatten-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(work, "flatten.test")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(work, "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(root, uid, gid); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, "-test.run=^TestApplyRulesUnprivileged$", "-test.v")
	cmd.Env = append(os.Environ(), "FLATTEN_TEST_UNPRIVILEGED_ROOT="+root, "HOME="+work)
	cmd.Dir = work
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("flattening as uid %d: %v\n%s", uid, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestApplyRulesUnprivileged") {
		t.Fatalf("the unprivileged run did not pass:\n%s", out)
	}
	checkRules(t, root, testimage.RootlessView(testimage.WantRules(), uid, gid), true)
}

// snapshot records a host directory in a form that shows any change: the
// tree plus each file's link count.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	for p, n := range testimage.ReadTree(t, dir) {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, p), &st); err != nil {
			t.Fatal(err)
		}
		n.Inode = 0
		b.WriteString(p + " " + n.String() + " nlink=" + strconv.Itoa(int(st.Nlink)) + " mtime=" + n.MTime.String() + "\n")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	b.WriteString("dir mode " + strconv.Itoa(int(st.Mode)) + "\n")
	return b.String()
}

// newVictim makes a host directory outside any root file system, holding
// a file "secret".
func newVictim(t *testing.T) string {
	t.Helper()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	return victim
}

func TestApplyHostileImages(t *testing.T) {
	victim := newVictim(t)
	for _, tc := range testimage.HostileCases(victim) {
		for _, rootless := range []bool{false, true} {
			name := tc.Name
			if rootless {
				name += "/rootless"
			}
			t.Run(name, func(t *testing.T) {
				before := snapshot(t, victim)
				root := newRoot(t)
				_, err := applyAll(t, root, Options{Rootless: rootless || os.Geteuid() != 0}, tc.Layers)
				switch {
				case tc.WantErr == "" && err != nil:
					t.Errorf("apply: %v, want success with everything inside the root", err)
				case tc.WantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.WantErr)):
					t.Errorf("apply: error %v, want one containing %q", err, tc.WantErr)
				}
				if after := snapshot(t, victim); after != before {
					t.Errorf("the host directory outside the root changed:\nbefore:\n%safter:\n%s", before, after)
				}
				for p, n := range testimage.ReadTree(t, root) {
					if n.Type == "char" || n.Type == "block" {
						t.Errorf("device node %s created", p)
					}
				}
			})
		}
	}
	// The absolute name lands inside the root, re-rooted.
	root := newRoot(t)
	if _, err := applyAll(t, root, Options{Rootless: os.Geteuid() != 0}, testimage.HostileCases(victim)[1].Layers); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, victim, "absolute")); err != nil || string(b) != "x" {
		t.Errorf("absolute entry not re-rooted inside the root: %q, %v", b, err)
	}
}

func TestApplyLimits(t *testing.T) {
	layer := []testimage.Entry{
		testimage.Dir("d", 0o755),
		testimage.File("d/a", strings.Repeat("a", 4096), 0o644),
		testimage.File("d/b", "b", 0o644),
	}
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"entries", Options{MaxEntries: 2}, "entries"},
		{"bytes", Options{MaxBytes: 3000}, "size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Rootless = true
			_, err := applyAll(t, newRoot(t), tt.opts, [][]testimage.Entry{layer})
			var le *LimitError
			if !errors.As(err, &le) || le.What != tt.want {
				t.Fatalf("apply: %v, want a %s LimitError", err, tt.want)
			}
		})
	}
	if _, err := applyAll(t, newRoot(t), Options{Rootless: true, MaxEntries: 3, MaxBytes: 1 << 20}, [][]testimage.Entry{layer}); err != nil {
		t.Errorf("apply within the limits: %v", err)
	}
}

func TestApplyInvalid(t *testing.T) {
	tests := []struct {
		name  string
		entry testimage.Entry
		want  string
	}{
		{"bare whiteout", testimage.File("d/.wh.", "", 0o644), "invalid whiteout"},
		{"whiteout of dotdot", testimage.File("d/.wh..", "", 0o644), "invalid whiteout"},
		{"hard link to missing file", testimage.Hardlink("x", "nope"), "hard link"},
		{"GNU volume header", testimage.Entry{Hdr: tar.Header{Typeflag: 'V', Name: "vol", Format: tar.FormatGNU}}, `entry "vol": unsupported tar entry type 'V'`},
		{"unknown type", testimage.Entry{Hdr: tar.Header{Typeflag: 'Z', Name: "d/z", Mode: 0o644}}, `entry "d/z": unsupported tar entry type 'Z'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := applyAll(t, newRoot(t), Options{Rootless: true}, [][]testimage.Entry{{tt.entry}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("apply: %v, want an error containing %q", err, tt.want)
			}
		})
	}
	// A truncated stream is an error, not a silently shorter tree.
	data := testimage.Tar(t, testimage.File("big", strings.Repeat("x", 10000), 0o644))
	a, err := NewApplier(newRoot(t), Options{Rootless: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.ApplyLayer(t.Context(), io.LimitReader(bytes.NewReader(data), 5000)); err == nil {
		t.Error("a truncated layer applied without error")
	}
}

// TestApplyGNUSparse applies an old GNU sparse file (tar type 'S', see
// testdata/README.md): it is a regular file whose holes read as zeros.
func TestApplyGNUSparse(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "gnu-sparse.tar"))
	if err != nil {
		t.Fatal(err)
	}
	if hdr, err := tar.NewReader(bytes.NewReader(data)).Next(); err != nil || hdr.Typeflag != tar.TypeGNUSparse {
		t.Fatalf("fixture: %v, %v; want a TypeGNUSparse entry", hdr, err)
	}
	root := newRoot(t)
	a, err := NewApplier(root, Options{Rootless: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.ApplyLayer(t.Context(), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 1<<20)
	copy(want, "head")
	copy(want[len(want)-4:], "tail")
	got, err := os.ReadFile(filepath.Join(root, "sparse"))
	if err != nil {
		t.Fatalf("the sparse file was not written: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("sparse file: %d bytes starting %q and ending %q; want 1 MiB of zeros between head and tail", len(got), got[:min(len(got), 8)], got[max(len(got)-8, 0):])
	}
	if st := a.Stats(); st.Files != 1 || st.FileBytes != int64(len(want)) {
		t.Errorf("stats %+v: want 1 file of %d bytes", st, len(want))
	}
}

// TestApplyContiguousFile applies a contiguous file (tar type '7'), which
// POSIX says readers without special support treat as a regular file.
func TestApplyContiguousFile(t *testing.T) {
	e := testimage.Entry{Hdr: tar.Header{Typeflag: tar.TypeCont, Name: "c", Mode: 0o640, Size: 2, ModTime: testimage.MTime}, Body: "hi"}
	root := newRoot(t)
	if _, err := applyAll(t, root, Options{Rootless: true}, [][]testimage.Entry{{e}}); err != nil {
		t.Fatal(err)
	}
	if n := testimage.ReadTree(t, root)["c"]; n.Type != "file" || n.Body != "hi" || n.Mode.Perm() != 0o640 {
		t.Errorf("contiguous file: %v; want a regular file -rw-r----- holding hi", n)
	}
}

// TestApplyDoesNotWriteThroughHostHardLinks applies entries over a file of
// the root that is a hard link to a host file (a tree made by other means
// than this package, say): every kind of entry replaces the link, and
// nothing reaches the host file's content, mode, owner or times.
func TestApplyDoesNotWriteThroughHostHardLinks(t *testing.T) {
	victim := newVictim(t)
	tests := []struct {
		name  string
		entry testimage.Entry
	}{
		{"file", testimage.File("planted", "overwritten", 0o4777, testimage.Owner(123, 456), testimage.Xattr("user.planted", "x"))},
		{"directory", testimage.Dir("planted", 0o777)},
		{"symlink", testimage.Symlink("planted", "/elsewhere")},
		{"hard link", testimage.Hardlink("planted", "other")},
		{"fifo", testimage.Fifo("planted", 0o777)},
		{"whiteout", testimage.Whiteout("planted")},
	}
	for _, tt := range tests {
		for _, rootless := range []bool{false, true} {
			name := tt.name
			if rootless {
				name += "/rootless"
			}
			t.Run(name, func(t *testing.T) {
				root := newRoot(t)
				if err := os.Link(filepath.Join(victim, "secret"), filepath.Join(root, "planted")); err != nil {
					t.Skipf("cannot hard link the host file into the root: %v", err)
				}
				before := testimage.ReadTree(t, victim)
				layers := [][]testimage.Entry{{testimage.File("other", "other", 0o644), tt.entry}}
				if _, err := applyAll(t, root, Options{Rootless: rootless || os.Geteuid() != 0}, layers); err != nil {
					t.Fatal(err)
				}
				for _, d := range testimage.CompareTrees(before, testimage.ReadTree(t, victim), true, true) {
					t.Errorf("the host file changed through the hard link: %s", d)
				}
				var st syscall.Stat_t
				if err := syscall.Lstat(filepath.Join(victim, "secret"), &st); err != nil || st.Nlink != 1 {
					t.Errorf("host file: %d links, %v; want 1 (the root's alias replaced)", st.Nlink, err)
				}
				if n, err := syscall.Listxattr(filepath.Join(victim, "secret"), make([]byte, 1024)); n != 0 {
					t.Errorf("extended attributes set on the host file (%d bytes of names, %v)", n, err)
				}
			})
		}
	}
}
