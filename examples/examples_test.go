// The examples are built and run against the libkrun test double, each in
// its own KRUNBOX_HOME, with the busybox test image as an OCI layout.
package examples_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/internal/testutil/agenttest"
	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/internal/testutil/testkrun"
)

func TestMain(m *testing.M) { os.Exit(agenttest.Main(m)) }

// example builds the example program name and returns a function running
// it in a fresh krunbox home with the test double, and the busybox image's
// reference.
func example(t *testing.T, name string) (func(stdin string, args ...string) (string, error), string) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs go to build the example")
	}
	lib := testkrun.Library(t)
	layout := testimage.WriteLayout(t, filepath.Join(t.TempDir(), "busybox"), "latest", testimage.Busybox(t))
	bin := filepath.Join(t.TempDir(), name)
	build := exec.Command("go", "build", "-o", bin, "./"+name)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	home := t.TempDir()
	t.Cleanup(func() { removeAll(t, home) })
	env := []string{"PATH=" + os.Getenv("PATH"), "KRUNBOX_HOME=" + home, "KRUNBOX_LIBKRUN=" + lib, "KRUNBOX_AGENT=" + agenttest.Binary()}
	return func(stdin string, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		cmd.Stdin = strings.NewReader(stdin)
		var out bytes.Buffer
		cmd.Stdout = &out
		cmd.Stderr = &out
		err := cmd.Run()
		return out.String(), err
	}, "oci:" + layout + ":latest"
}

func TestRun(t *testing.T) {
	run, image := example(t, "run")
	out, err := run("", "-image", image, "--", "sh", "-c", "echo hello from $(hostname); exit 3")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 || !strings.HasPrefix(out, "hello from kb-") {
		t.Errorf("run: %q, %v; want the guest's output and its exit code 3", out, err)
	}
}

func TestStream(t *testing.T) {
	stream, image := example(t, "stream")
	out, err := stream("one\ntwo\n", "-image", image, "while read l; do echo got $l; done")
	if err != nil || !strings.Contains(out, "] got one\n") || !strings.Contains(out, "] got two\n") {
		t.Errorf("stream: %q, %v", out, err)
	}
}

func TestCopy(t *testing.T) {
	cp, image := example(t, "copy")
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "out")
	os.WriteFile(filepath.Join(src, "data.txt"), bytes.Repeat([]byte("krunbox "), 1000), 0o640)
	if out, err := cp("", "-image", image, src, dst); err != nil {
		t.Fatalf("copy: %q, %v", out, err)
	}
	for _, f := range []string{"data.txt.gz", "NOTE.gz"} {
		fi, err := os.Stat(filepath.Join(dst, f))
		if err != nil || fi.Size() == 0 || fi.Size() > 1000 {
			t.Errorf("%s copied out: %v, %v", f, fi, err)
		}
	}
}

func TestNamed(t *testing.T) {
	named, image := example(t, "named")
	for i, want := range []string{"created example-named\ncount: 1 ", "count: 2 "} {
		out, err := named("", "-image", image)
		if err != nil || !strings.Contains(out, want) {
			t.Fatalf("run %d: %q, %v; want %q", i+1, out, err, want)
		}
	}
	// Stopped, it keeps its root file system: the count goes on.
	if out, err := named("", "-stop"); err != nil {
		t.Fatalf("-stop: %q, %v", out, err)
	}
	if out, err := named("", "-image", image); err != nil || !strings.Contains(out, "count: 3 (sandbox example-named is running") {
		t.Errorf("after a stop: %q, %v", out, err)
	}
	if out, err := named("", "-rm"); err != nil {
		t.Fatalf("-rm: %q, %v", out, err)
	}
	if out, err := named("", "-stop"); err == nil || !strings.Contains(out, "no such sandbox") {
		t.Errorf("-stop after -rm: %q, %v", out, err)
	}
}

// removeAll removes the sandboxes an example left, so that no VM outlives
// its test.
func removeAll(t *testing.T, home string) {
	h, err := hostapi.NewHost(hostapi.WithDirs(hostapi.Dirs{
		State: filepath.Join(home, "state"), Cache: filepath.Join(home, "cache"), Config: filepath.Join(home, "config"),
	}))
	if err != nil {
		t.Error(err)
		return
	}
	sbs, _ := h.List()
	for _, sb := range sbs {
		if err := sb.Remove(context.Background()); err != nil {
			t.Errorf("remove %s: %v", sb.Name(), err)
		}
	}
}
