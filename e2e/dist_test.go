package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/testkrun"
	"github.com/krunbox/krunbox/krun"
)

// distLibs makes a LIBKRUN_DIR as a copied library folder has it: the
// versioned files, and libkrun.so.1 and libkrunfw.so.5 as small text files
// naming them (symlinks that lost their kind). libkrun is the test double,
// libkrunfw a stand-in with the real one's soname and a kernel version.
func distLibs(t *testing.T) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	data, err := os.ReadFile(testkrun.Library(t))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, s string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("libkrun.so.1.19.0", string(data), 0o755)
	write("libkrun.so.1", "libkrun.so.1.19.0\n", 0o644)
	src := filepath.Join(t.TempDir(), "krunfw.c")
	if err := os.WriteFile(src, []byte("const char kb_banner[] = \"Linux version 6.12.91 (stand-in)\";\nint krunfw_get_version(void) { return 5; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-Wl,-soname,libkrunfw.so.5", "-o", filepath.Join(dir, "libkrunfw.so.5.5.0"), src).CombinedOutput(); err != nil {
		t.Fatalf("compile libkrunfw: %v\n%s", err, out)
	}
	write("libkrunfw.so.5", "libkrunfw.so.5.5.0\n", 0o644)
	return dir
}

// dist runs hack/dist/dist.sh with args and LIBKRUN_DIR=libs, and returns
// its output.
func dist(t *testing.T, libs, out string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(testkrun.RepoRoot(), "hack", "dist", "dist.sh"), args...)
	cmd.Env = append(os.Environ(), "KRUNBOX="+krunboxBin, "VERSION=test", "OUT="+out, "LIBKRUN_DIR="+libs)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dist.sh %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return string(b)
}

// TestDistBundle builds the release bundle (make dist) from a library
// folder like ../shared/realvm/lib, unpacks it in a fresh prefix, and
// checks that krunbox there, with no environment variable, finds and
// loads the bundled libkrun and libkrunfw, and runs a command in a VM (on
// the test double).
func TestDistBundle(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the bundle carries libkrun on Linux only")
	}
	out := t.TempDir()
	libs := distLibs(t)
	dist(t, libs, out, "bundle")
	name := "krunbox-test-" + runtime.GOOS + "-" + runtime.GOARCH
	tarball := filepath.Join(out, name+".tar.gz")

	prefix := filepath.Join(t.TempDir(), "opt", "krunbox")
	if err := os.MkdirAll(prefix, 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("tar", "-xzf", tarball, "--strip-components=1", "-C", prefix).CombinedOutput(); err != nil {
		t.Fatalf("unpack: %v\n%s", err, b)
	}
	for _, f := range []string{"bin/krunbox", "lib/krunbox/libkrun.so.1", "lib/krunbox/libkrunfw.so.5",
		"share/doc/krunbox/README.md", "share/doc/krunbox/LICENSE", "share/doc/krunbox/SOURCES.md",
		"share/doc/krunbox/licenses/libkrun-Apache-2.0.txt", "share/doc/krunbox/licenses/libkrunfw-LGPL-2.1.txt",
		"share/doc/krunbox/licenses/linux-GPL-2.0.txt",
		// the double exports krun_set_virtiofs_cache, as krunbox's libkrun does
		"share/doc/krunbox/libkrun-patches/0001-virtiofs-let-the-caller-set-a-share-s-cache-behaviour.patch"} {
		if fi, err := os.Lstat(filepath.Join(prefix, f)); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("bundle: %s: %v, want a regular file", f, err)
		}
	}
	sources, _ := os.ReadFile(filepath.Join(prefix, "share/doc/krunbox/SOURCES.md"))
	for _, w := range []string{"libkrun 1.19.0", "libkrunfw 5.5.0", "Linux 6.12.91", "tag v5.5.0", "linux-6.12.91.tar.xz",
		"tag v1.19.0, with krunbox's changes in `libkrun-patches/`"} {
		if !strings.Contains(string(sources), w) {
			t.Errorf("SOURCES.md lacks %q:\n%s", w, sources)
		}
	}
	// The text file libkrun.so.1 was followed: the bundle holds the library.
	got, _ := os.ReadFile(filepath.Join(prefix, "lib/krunbox/libkrun.so.1"))
	if want, _ := os.ReadFile(filepath.Join(libs, "libkrun.so.1.19.0")); string(got) != string(want) {
		t.Errorf("lib/krunbox/libkrun.so.1 is %d bytes, want the %d of libkrun.so.1.19.0", len(got), len(want))
	}

	// Run through a symlink on PATH, as a user installing into /opt does.
	binDir := t.TempDir()
	if err := os.Symlink(filepath.Join(prefix, "bin", "krunbox"), filepath.Join(binDir, "krunbox")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(krunboxBin), "krunbox-agent-linux-"+runtime.GOARCH)); err == nil {
		// A krunbox built without make embeds no agent: give it its own.
		b, _ := os.ReadFile(filepath.Join(filepath.Dir(krunboxBin), "krunbox-agent-linux-"+runtime.GOARCH))
		if err := os.WriteFile(filepath.Join(prefix, "bin", "krunbox-agent-linux-"+runtime.GOARCH), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	home := t.TempDir()
	krunbox := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(binDir, "krunbox"), args...)
		// Nothing that points at a libkrun: no KRUNBOX_LIBKRUN, no
		// LD_LIBRARY_PATH.
		cmd.Env = []string{"PATH=" + binDir + ":/usr/bin:/bin", "HOME=" + home, "KRUNBOX_HOME=" + home}
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	doc, _ := krunbox("doctor", "--quick")
	lib := filepath.Join(prefix, "lib", "krunbox")
	for _, w := range []string{
		"✓ libkrun: " + filepath.Join(lib, "libkrun.so.1") + " (" + krun.WhyBundled + ")",
		"✓ libkrunfw: " + filepath.Join(lib, "libkrunfw.so.5") + ", ABI version 5 (beside libkrun)",
	} {
		if !strings.Contains(doc, w) {
			t.Errorf("doctor in the unpacked bundle lacks %q:\n%s", w, doc)
		}
	}
	if strings.Contains(doc, "✗ namespaces") || imageErr != nil {
		t.Skipf("the test double cannot run a VM here (namespaces, or no image: %v):\n%s", imageErr, doc)
	}
	if res, err := krunbox("run", "--rm", image, "--", "echo", "from the bundle"); err != nil || !strings.Contains(res, "from the bundle") {
		t.Fatalf("krunbox run from the unpacked bundle: %v\n%s", err, res)
	}
}

// TestDistWithoutLibkrun: without LIBKRUN_DIR, make dist and make
// pi-package still work and say that the result needs a system libkrun.
func TestDistWithoutLibkrun(t *testing.T) {
	out := t.TempDir()
	msg := dist(t, "", out, "bundle")
	if !strings.Contains(msg, "needs a system libkrun") {
		t.Errorf("dist.sh bundle without LIBKRUN_DIR says %q, want that the bundle needs a system libkrun", msg)
	}
	name := "krunbox-test-" + runtime.GOOS + "-" + runtime.GOARCH
	b, err := exec.Command("tar", "-tzf", filepath.Join(out, name+".tar.gz")).CombinedOutput()
	if err != nil {
		t.Fatalf("list: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), name+"/bin/krunbox") || strings.Contains(string(b), "lib/krunbox") {
		t.Errorf("bundle without LIBKRUN_DIR holds:\n%s\nwant bin/krunbox and no lib/krunbox", b)
	}
	pkg := t.TempDir()
	if msg := dist(t, "", out, "libs", pkg); !strings.Contains(msg, "needs a system libkrun") {
		t.Errorf("dist.sh libs without LIBKRUN_DIR says %q", msg)
	}
	if ents, _ := os.ReadDir(pkg); len(ents) != 0 {
		t.Errorf("dist.sh libs without LIBKRUN_DIR wrote %d files", len(ents))
	}
}

// TestDistPiLibs: the pi package gets the libraries beside its krunbox,
// where krunbox finds them, with their licences.
func TestDistPiLibs(t *testing.T) {
	pkg := t.TempDir()
	dist(t, distLibs(t), t.TempDir(), "libs", pkg)
	for _, f := range []string{"libkrun.so.1", "libkrunfw.so.5", "SOURCES.md", "licenses/libkrunfw-LGPL-2.1.txt"} {
		if fi, err := os.Lstat(filepath.Join(pkg, f)); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: %v, want a regular file", f, err)
		}
	}
}

// A LIBKRUN_DIR whose libkrun.so.1 names a file outside it, or is not a
// library, is refused with a clear error.
func TestDistBadLibkrunDir(t *testing.T) {
	tests := []struct{ name, content, want string }{
		{"names a path", "../../etc/passwd\n", "want a file name in"},
		{"names nothing there", "libkrun.so.1.99\n", "is not a file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "libkrun.so.1"), []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(filepath.Join(testkrun.RepoRoot(), "hack", "dist", "dist.sh"), "libs", t.TempDir())
			cmd.Env = append(os.Environ(), "LIBKRUN_DIR="+dir)
			b, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(b), tt.want) {
				t.Errorf("dist.sh libs: %v, %q; want a failure saying %q", err, b, tt.want)
			}
		})
	}
}
