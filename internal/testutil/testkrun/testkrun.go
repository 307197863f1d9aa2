// Package testkrun gives tests the libkrun test double (hack/testkrun) and
// what VMs under it need: a built library, variants of it, and a busybox
// root filesystem.
package testkrun

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
)

// LibraryEnv names the prebuilt test double ("make testkrun" sets it for
// "make test"); without it the tests build the double themselves.
const LibraryEnv = "KRUNBOX_TEST_LIBKRUN"

// RepoRoot is the root of the krunbox source tree this package was built
// from.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

var buildMu sync.Mutex

// Library returns the test double: KRUNBOX_TEST_LIBKRUN when set, else one
// built from hack/testkrun with cc. It skips the test when neither works.
func Library(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(LibraryEnv); p != "" {
		if abs, err := filepath.Abs(p); err == nil {
			if _, err := os.Stat(abs); err == nil {
				return abs
			}
		}
		t.Fatalf("%s=%s: no such file (run make testkrun)", LibraryEnv, p)
	}
	return Build(t)
}

// Build compiles hack/testkrun with the given extra compiler flags (such
// as "-DTESTKRUN_LEGACY") into a cache directory and returns the library.
// It skips the test when there is no C compiler.
func Build(t testing.TB, cflags ...string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the libkrun test double (install gcc, or run make testkrun and set " + LibraryEnv + ")")
	}
	srcs, _ := filepath.Glob(filepath.Join(RepoRoot(), "hack", "testkrun", "*.[ch]"))
	if len(srcs) == 0 {
		t.Skip("hack/testkrun sources not found: set " + LibraryEnv)
	}
	sort.Strings(srcs)
	h := sha256.New()
	fmt.Fprintln(h, cflags)
	for _, s := range srcs {
		data, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(data)
	}
	dir := filepath.Join(os.TempDir(), "krunbox-testkrun-"+hex.EncodeToString(h.Sum(nil))[:16])
	lib := filepath.Join(dir, "libkrun.so.1")
	buildMu.Lock()
	defer buildMu.Unlock()
	if _, err := os.Stat(lib); err == nil {
		return lib
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var cs []string
	for _, s := range srcs {
		if strings.HasSuffix(s, ".c") {
			cs = append(cs, s)
		}
	}
	tmp := lib + fmt.Sprintf(".%d.tmp", os.Getpid())
	args := append([]string{"-shared", "-fPIC", "-fvisibility=hidden", "-O2", "-Wall", "-Wl,-soname,libkrun.so.1", "-o", tmp}, cflags...)
	args = append(append(args, cs...), "-lpthread")
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("build the libkrun test double: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, lib); err != nil {
		t.Fatal(err)
	}
	return lib
}

// CompileLibrary builds a shared library from C source, for tests that need
// a library other than the double (a broken libkrun, say).
func CompileLibrary(t testing.TB, name, src string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	c := filepath.Join(dir, name+".c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, name+".so")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, c).CombinedOutput(); err != nil {
		t.Fatalf("compile %s: %v\n%s", name, err, out)
	}
	return lib
}

// KrunfwName is the file name under which libkrun loads libkrunfw on Linux.
const KrunfwName = "libkrunfw.so.5"

// Krunfw builds a stand-in libkrunfw from C source (such as
// "int krunfw_get_version(void) { return 4; }") as KrunfwName, alone in a new
// directory, and returns its path. A process started with that directory in
// LD_LIBRARY_PATH loads it as libkrunfw (the loader reads the variable when
// a process starts, so it takes a child process).
func Krunfw(t testing.TB, src string) string {
	t.Helper()
	lib := CompileLibrary(t, "krunfw", src)
	path := filepath.Join(filepath.Dir(lib), KrunfwName)
	if err := os.Rename(lib, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// AbortingLibrary builds a library exporting every function libkrun must
// have, whose krun_create_ctx aborts the process, as a broken libkrun can.
func AbortingLibrary(t testing.TB) string {
	t.Helper()
	return CompileLibrary(t, "aborting", `#include <stdlib.h>
#define F(name) int name() { return 0; }
F(krun_set_log_level) F(krun_free_ctx) F(krun_set_vm_config) F(krun_set_root) F(krun_add_virtiofs)
F(krun_set_exec) F(krun_set_env) F(krun_set_workdir) F(krun_set_rlimits) F(krun_add_vsock_port)
F(krun_set_port_map) F(krun_set_console_output) F(krun_start_enter)
int krun_create_ctx(void) { abort(); }
`)
}

// Busybox returns the path of a static busybox, or skips the test.
func Busybox(t testing.TB) string {
	t.Helper()
	for _, p := range []string{os.Getenv("KRUNBOX_TEST_BUSYBOX"), "/bin/busybox", "/usr/bin/busybox"} {
		if p == "" {
			continue
		}
		if out, err := exec.Command("file", "-L", p).Output(); err == nil && !strings.Contains(string(out), "statically linked") {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("no static busybox (apt-get install busybox-static, or set KRUNBOX_TEST_BUSYBOX)")
	return ""
}

// BusyboxRoot fills dir with a minimal root filesystem: a static busybox
// as /bin/busybox with /bin/sh and the applets the tests use linked to it.
func BusyboxRoot(t testing.TB, dir string) {
	t.Helper()
	data, err := os.ReadFile(Busybox(t))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, app := range []string{"sh", "cat", "echo", "ls", "stat", "id", "hostname", "ip", "sleep", "touch", "rm", "mkdir", "env", "kill", "ulimit", "test", "grep", "mount"} {
		if err := os.Symlink("busybox", filepath.Join(bin, app)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"dev", "proc", "sys", "tmp", "etc"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}
