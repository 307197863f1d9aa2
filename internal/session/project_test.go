package session

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/krunbox/krunbox/internal/userconfig"
)

// pi's own names for these paths (pi/src/workspace.ts, run with node): the
// two must agree.
func TestSandboxNameAsPi(t *testing.T) {
	for ws, want := range map[string]string{
		"/home/ann/src/My Project!":      "pi-my-project-d2f87117",
		"/":                              "pi-ws-8a5edab2",
		"/x/ÜÜÜ":                         "pi-ws-ced46427",
		"/x/abcdefghijklmnopqrstuvw-xyz": "pi-abcdefghijklmnopqrstuvw-55fb85e8",
	} {
		if got := SandboxName("pi", ws); got != want {
			t.Errorf("SandboxName(pi, %q) = %q, want %q", ws, got, want)
		}
	}
}

func TestLoadProject(t *testing.T) {
	ws := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", ws).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	local := "oci:" + t.TempDir() + ":latest"
	tests := []struct {
		name    string
		project string // .krunbox.toml; "" for none
		trusted bool
		flags   ProjectFlags
		check   func(t *testing.T, p *Project)
	}{
		{"no project file: the user's", "", false, ProjectFlags{}, func(t *testing.T, p *Project) {
			c := p.Request.Config
			if c.Image != "alpine" || c.CPUs != 2 || c.MemoryMiB != 2048 || c.Network != "public" || c.Isolate || c.Workspace != ws {
				t.Errorf("config %+v", c)
			}
			if p.Request.Config.Name != SandboxName("mcp", ws) || len(p.Notes) != 0 {
				t.Errorf("name %s, notes %q", p.Request.Config.Name, p.Notes)
			}
		}},
		{"untrusted: narrows only", "image = \"" + local + "\"\ncpus = 1\nmemory_mib = 4096\nnetwork = \"open\"\nenv = {A = \"1\"}\n", false, ProjectFlags{}, func(t *testing.T, p *Project) {
			c := p.Request.Config
			if c.Image != "alpine" || c.CPUs != 1 || c.MemoryMiB != 2048 || c.Network != "public" || !slices.Equal(c.Env, []string{"A=1"}) {
				t.Errorf("config %+v", c)
			}
			notes := strings.Join(p.Notes, "\n")
			for _, want := range []string{"untrusted", "image = " + local, "memory_mib = 4096", "network = open"} {
				if !strings.Contains(notes, want) {
					t.Errorf("notes %q lack %q", notes, want)
				}
			}
		}},
		{"untrusted: a narrower network, a registry image, isolated", "image = \"debian\"\nnetwork = \"allow=example.com\"\nworkspace = \"isolated\"\n", false, ProjectFlags{}, func(t *testing.T, p *Project) {
			c := p.Request.Config
			if c.Image != "debian" || c.Network != "allow=example.com" || !c.Isolate || !strings.HasSuffix(c.Name, "-iso") {
				t.Errorf("config %+v", c)
			}
		}},
		{"untrusted: live cannot undo --isolate", "workspace = \"live\"\n", false, ProjectFlags{Isolate: true}, func(t *testing.T, p *Project) {
			if !p.Request.Config.Isolate || !strings.Contains(strings.Join(p.Notes, "\n"), `workspace = "live"`) {
				t.Errorf("isolate %v, notes %q", p.Request.Config.Isolate, p.Notes)
			}
		}},
		{"trusted: widens", "cpus = 8\nnetwork = \"open\"\n", true, ProjectFlags{}, func(t *testing.T, p *Project) {
			if c := p.Request.Config; c.CPUs != 8 || c.Network != "open" {
				t.Errorf("config %+v", c)
			}
		}},
		{"flags win", "network = \"none\"\n", false, ProjectFlags{Image: local, Network: "tsi"}, func(t *testing.T, p *Project) {
			if c := p.Request.Config; c.Image != local || c.Network != "tsi" {
				t.Errorf("config %+v", c)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(ws, ProjectFile)
			os.Remove(file)
			if tt.project != "" {
				if err := os.WriteFile(file, []byte(tt.project), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cfgDir := t.TempDir()
			if tt.trusted {
				if err := os.WriteFile(filepath.Join(cfgDir, TrustFile), []byte("trusted_projects = [\""+ws+"\"]\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			p, err := LoadProject(ProjectOptions{Workspace: ws, Prefix: "mcp", User: userconfig.Defaults(), ConfigDir: cfgDir, Flags: tt.flags})
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, p)
		})
	}
}

// A project's file is the repository's: a FIFO, a huge file or an unknown
// key is an error, quickly.
func TestLoadProjectHostileFile(t *testing.T) {
	for name, make := range map[string]func(string) error{
		"fifo": func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"huge": func(p string) error {
			return os.WriteFile(p, []byte("#"+strings.Repeat("x", MaxConfigBytes)+"\n"), 0o644)
		},
		"unknown key": func(p string) error { return os.WriteFile(p, []byte("fallback = \"host\"\n"), 0o644) },
		"directory":   func(p string) error { return os.Mkdir(p, 0o755) },
	} {
		t.Run(name, func(t *testing.T) {
			ws := t.TempDir()
			if err := make(filepath.Join(ws, ProjectFile)); err != nil {
				t.Fatal(err)
			}
			_, err := LoadProject(ProjectOptions{Workspace: ws, Prefix: "mcp", User: userconfig.Defaults(), ConfigDir: t.TempDir()})
			if err == nil || !strings.Contains(err.Error(), ProjectFile) {
				t.Errorf("err %v, want one about %s", err, ProjectFile)
			}
		})
	}
}

func TestLoadProjectRefusedWorkspace(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, ws := range []string{"/", "/tmp", "/etc", home, filepath.Dir(home)} {
		_, err := LoadProject(ProjectOptions{Workspace: ws, Prefix: "mcp", User: userconfig.Defaults(), ConfigDir: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "refusing to mount") {
			t.Errorf("workspace %s: %v, want a refusal", ws, err)
		}
	}
}
