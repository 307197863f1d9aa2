package hostapi_test

import (
	"io"
	"os"
	"testing"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/testutil/agenttest"
	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/internal/testutil/testkrun"
	"github.com/krunbox/krunbox/krun"
)

// TestExampleRun runs ExampleRun as a program would, with the default
// Host (KRUNBOX_HOME, the libkrun named by KRUNBOX_LIBKRUN): on the libkrun
// test double, with a busybox image served on 127.0.0.1.
func TestExampleRun(t *testing.T) {
	if err := vmm.CheckNamespaces(); err != nil {
		t.Skipf("the libkrun test double needs namespaces: %v", err)
	}
	home := t.TempDir()
	t.Setenv(krun.HomeEnv, home)
	t.Setenv(krun.LibraryEnv, testkrun.Library(t))
	t.Setenv("KRUNBOX_AGENT", agenttest.Binary())
	defer func(was string) { image = was }(image)
	image = testimage.Serve(t, testimage.Busybox(t))

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stdout := os.Stdout
	os.Stdout = w
	out := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		out <- b
	}()
	func() {
		defer func() { os.Stdout = stdout; w.Close() }()
		ExampleRun()
	}()
	if got, want := string(<-out), "exit 3: hello from Linux\n"; got != want {
		t.Errorf("ExampleRun printed %q, want %q", got, want)
	}
	dirs, err := hostapi.DefaultDirs()
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dirs.Sandboxes()); len(entries) != 0 {
		t.Errorf("sandboxes left in %s: %v", dirs.Sandboxes(), entries)
	}
}
