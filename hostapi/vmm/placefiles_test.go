package vmm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/internal/testutil/testkrun"
)

// victimDir makes a host directory outside every root, holding what the
// runner would write there if it followed a planted /.krunbox link.
func victimDir(t *testing.T) (string, map[string]testimage.Node) {
	t.Helper()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"agent.json": "victim's config\n", "krunbox-agent": "victim's program\n"} {
		if err := os.WriteFile(filepath.Join(victim, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return victim, testimage.ReadTree(t, victim)
}

func checkVictim(t *testing.T, victim string, want map[string]testimage.Node) {
	t.Helper()
	for _, d := range testimage.CompareTrees(want, testimage.ReadTree(t, victim), true, true) {
		t.Errorf("victim directory changed: %s", d)
	}
}

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
			victim, before := victimDir(t)
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
				checkVictim(t, victim, before)
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
