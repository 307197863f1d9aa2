package vmm

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/testkrun"
	"github.com/krunbox/krunbox/internal/testutil/victim"
)

// A /.krunbox symlink to a host directory, in the image or planted by the
// guest before a start, is replaced in the sandbox's root: the runner's
// writes of the agent and its config never follow it, and the VM starts.
func TestPlantedKrunboxLinkIsReplaced(t *testing.T) {
	for _, tt := range []struct {
		name    string
		overlay bool // an overlay root rather than a plain directory
		legacy  bool // libkrun without overlay files (1.17, 1.18)
	}{
		{"plain root", false, false},
		{"plain root on libkrun without overlay files", false, true},
		{"overlay root", true, false},
		{"overlay root on libkrun without overlay files", true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			skipIfReal(t)
			v := victim.New(t)
			victim := v.Path
			// The guest shows what it got, then plants the link itself.
			spec, dir := shellSpec(t, `cat /.krunbox/agent.json; rm -rf /.krunbox; /bin/busybox ln -s `+victim+` /.krunbox`)
			if tt.legacy {
				spec.Library = testkrun.Build(t, "-DTESTKRUN_LEGACY")
			}
			image := spec.Root.Dir
			// The image's layer holds the link.
			if err := os.Symlink(victim, filepath.Join(image, ".krunbox")); err != nil {
				t.Fatal(err)
			}
			if tt.overlay {
				state := filepath.Dir(spec.ConsoleLog)
				spec.Root = Root{Lower: image, Upper: filepath.Join(state, "upper"), Work: filepath.Join(state, "work"), Merged: filepath.Join(state, "merged")}
			}
			spec.Files = []File{
				{Path: "/.krunbox/krunbox-agent", Mode: 0o755, Data: []byte("agent\n")},
				{Path: "/.krunbox/agent.json", Mode: 0o644, Data: []byte("config\n")},
			}
			for run := 1; run <= 2; run++ {
				if es := wait(t, startVM(t, dir, spec)); es.Code != 0 {
					t.Fatalf("run %d: exit %v: %s\nrunner log: %s", run, es, readFile(t, spec.ConsoleLog), readFile(t, filepath.Join(dir, LogFile)))
				}
				if got := readFile(t, spec.ConsoleLog); got != "config\n" {
					t.Errorf("run %d: the guest read %q as its config", run, got)
				}
				v.Check(t, fmt.Sprintf("run %d", run))
			}

			// Directories where krunbox's files go are replaced too.
			spec.Exec.Args = []string{"-c", "cat /.krunbox/agent.json; rm -rf /.krunbox; mkdir -p /.krunbox/agent.json/sub /.krunbox/krunbox-agent"}
			for run := 1; run <= 2; run++ {
				if es := wait(t, startVM(t, dir, spec)); es.Code != 0 {
					t.Fatalf("directories, run %d: exit %v: %s\nrunner log: %s", run, es, readFile(t, spec.ConsoleLog), readFile(t, filepath.Join(dir, LogFile)))
				}
				if got := readFile(t, spec.ConsoleLog); got != "config\n" {
					t.Errorf("directories, run %d: the guest read %q as its config", run, got)
				}
			}
			if tt.overlay {
				// The image tree is never written, not even to remove the link.
				if l, err := os.Readlink(filepath.Join(image, ".krunbox")); err != nil || l != victim {
					t.Errorf("image's /.krunbox: %q, %v; want the link left as it was", l, err)
				}
			}
		})
	}
}
