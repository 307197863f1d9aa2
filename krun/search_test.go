//go:build cgo && linux

package krun

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/testkrun"
)

// krunfwWithSoname builds a stand-in libkrunfw with the soname of the real
// one, which is what lets libkrun's dlopen by name find a copy already
// loaded from a path.
func krunfwWithSoname(t *testing.T, dir string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	src := filepath.Join(t.TempDir(), "krunfw.c")
	if err := os.WriteFile(src, []byte(krunfwSource), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, krunfwLinux)
	if b, err := exec.Command(cc, "-shared", "-fPIC", "-Wl,-soname,"+krunfwLinux, "-o", out, src).CombinedOutput(); err != nil {
		t.Fatalf("compile libkrunfw: %v\n%s", err, b)
	}
	return out
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// The default search finds the libkrun installed with krunbox (a release
// bundle's lib/krunbox, the pi package's folder), then $KRUNBOX_HOME/lib,
// follows the binary's real path, lets KRUNBOX_LIBKRUN win, and loads the
// libkrunfw beside libkrun so that libkrun's lookup by name finds it with
// no LD_LIBRARY_PATH. Each case runs a copy of this test binary, placed as
// krunbox would be, in a fresh process.
func TestSearchOrder(t *testing.T) {
	double := testkrun.Library(t)
	if f, _, err := KrunfwVersion(); err == nil {
		t.Skipf("this host has a libkrunfw (%s): the test needs one that has none", f)
	}
	type layout struct {
		exe  string            // where the binary goes, under the case's folder
		run  string            // what is run, when not exe (a symlink to it)
		libs map[string]string // library files: "libkrun" or "krunfw" or "junk", by place
		env  map[string]string // "{}" in a value is the case's folder
	}
	tests := []struct {
		name string
		layout
		want string // "{}" is the case's folder; "|"-separated as the helper prints
	}{
		{"bundle", layout{exe: "prefix/bin/krunbox", libs: map[string]string{"prefix/lib/krunbox/libkrun.so.1": "libkrun", "prefix/lib/krunbox/libkrunfw.so.5": "krunfw"}},
			"{}/prefix/lib/krunbox/libkrun.so.1|" + WhyBundled + "|{}/prefix/lib/krunbox/libkrunfw.so.5|<nil>"},
		{"bundle through a symlink", layout{exe: "opt/krunbox/bin/krunbox", run: "bin/krunbox", libs: map[string]string{"opt/krunbox/lib/krunbox/libkrun.so.1": "libkrun", "opt/krunbox/lib/krunbox/libkrunfw.so.5": "krunfw"}},
			"{}/opt/krunbox/lib/krunbox/libkrun.so.1|" + WhyBundled + "|{}/opt/krunbox/lib/krunbox/libkrunfw.so.5|<nil>"},
		{"pi package: beside the binary", layout{exe: "pkg/bin/linux-x64/krunbox", libs: map[string]string{"pkg/bin/linux-x64/libkrun.so.1": "libkrun", "pkg/bin/linux-x64/libkrunfw.so.5": "krunfw"}},
			"{}/pkg/bin/linux-x64/libkrun.so.1|" + WhyBeside + "|{}/pkg/bin/linux-x64/libkrunfw.so.5|<nil>"},
		{"bundle before KRUNBOX_HOME", layout{exe: "p/bin/krunbox", libs: map[string]string{"p/lib/krunbox/libkrun.so.1": "libkrun", "home/lib/libkrun.so.1": "libkrun"}, env: map[string]string{HomeEnv: "{}/home"}},
			"{}/p/lib/krunbox/libkrun.so.1|" + WhyBundled + "||load libkrunfw"},
		{"KRUNBOX_HOME", layout{exe: "p/bin/krunbox", libs: map[string]string{"home/lib/libkrun.so.1": "libkrun", "home/lib/libkrunfw.so.5": "krunfw"}, env: map[string]string{HomeEnv: "{}/home"}},
			"{}/home/lib/libkrun.so.1|" + WhyHome + "|{}/home/lib/libkrunfw.so.5|<nil>"},
		{"KRUNBOX_LIBKRUN wins, libkrunfw beside it", layout{exe: "p/bin/krunbox", libs: map[string]string{"p/lib/krunbox/libkrun.so.1": "libkrun", "mine/libkrun.so.1": "libkrun", "mine/libkrunfw.so.5": "krunfw"}, env: map[string]string{LibraryEnv: "{}/mine/libkrun.so.1"}},
			"{}/mine/libkrun.so.1|" + WhyEnv + "|{}/mine/libkrunfw.so.5|<nil>"},
		{"a libkrunfw beside it that does not load", layout{exe: "p/bin/krunbox", libs: map[string]string{"p/lib/krunbox/libkrun.so.1": "libkrun", "p/lib/krunbox/libkrunfw.so.5": "junk"}},
			"open: load libkrun: {}/p/lib/krunbox/libkrun.so.1: load the libkrunfw beside it: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			exe := filepath.Join(dir, tt.exe)
			copyFile(t, os.Args[0], exe, 0o755)
			for place, kind := range tt.libs {
				p := filepath.Join(dir, place)
				switch kind {
				case "libkrun":
					copyFile(t, double, p, 0o755)
				case "krunfw":
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
					krunfwWithSoname(t, filepath.Dir(p))
				case "junk":
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(p, []byte("libkrunfw.so.5.5.0\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			run := exe
			if tt.run != "" {
				run = filepath.Join(dir, tt.run)
				if err := os.MkdirAll(filepath.Dir(run), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(exe, run); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(run, "-test.run=^$")
			cmd.Env = []string{helperEnv + "=search", "PATH=" + os.Getenv("PATH")}
			for k, v := range tt.env {
				cmd.Env = append(cmd.Env, k+"="+strings.ReplaceAll(v, "{}", dir))
			}
			out, err := cmd.CombinedOutput()
			want := strings.ReplaceAll(tt.want, "{}", dir)
			if err != nil || !strings.HasPrefix(string(out), want) {
				t.Fatalf("search from %s: %q, %v; want %q", run, out, err, want)
			}
		})
	}
}

func TestInstallHint(t *testing.T) {
	h := (&LoadError{}).Hint()
	for _, w := range []string{"install libkrun", LibraryEnv} {
		if !strings.Contains(h, w) {
			t.Errorf("hint %q lacks %q", h, w)
		}
	}
	if !strings.Contains(h, InstallHint()) {
		t.Errorf("hint %q lacks the platform's install hint", h)
	}
	id, _ := osRelease()
	want := map[string]string{"fedora": "dnf install libkrun", "debian": "krunbox release bundle", "ubuntu": "no Ubuntu package"}[distro()]
	if id != "" && want != "" && !strings.Contains(h, want) {
		t.Errorf("on %s the hint %q lacks %q", id, h, want)
	}
}
