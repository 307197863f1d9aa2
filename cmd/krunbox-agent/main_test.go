//go:build linux

package main

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/internal/testutil/agenttest"
)

func TestMain(m *testing.M) { os.Exit(agenttest.Main(m)) }

func TestListenAddress(t *testing.T) {
	cfg := &protocol.Config{Port: 1234}
	for _, tt := range []struct {
		flag, network, address string
		ok                     bool
	}{
		{"", "vsock", "1234", true},
		{"vsock:99", "vsock", "99", true},
		{"unix:/run/a.sock", "unix", "/run/a.sock", true},
		{"unix:", "", "", false},
		{"vsock:port", "", "", false},
		{"tcp:1.2.3.4:5", "", "", false},
	} {
		n, a, err := listenAddress(tt.flag, cfg)
		if (err == nil) != tt.ok || n != tt.network || a != tt.address {
			t.Errorf("listenAddress(%q) = %q %q %v", tt.flag, n, a, err)
		}
	}
}

func TestStaticAndSelfContained(t *testing.T) {
	f, err := elf.Open(agenttest.Binary())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the agent is dynamically linked")
		}
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"/hostapi", "/krun", "/oci", "/cmd/krunbox", "/internal/"} {
			if strings.HasPrefix(dep, "github.com/krunbox/krunbox"+banned) && dep != "github.com/krunbox/krunbox/cmd/krunbox-agent" {
				t.Errorf("the agent imports host-side package %s", dep)
			}
		}
	}
}

func TestBadFlagsAndVersion(t *testing.T) {
	out, err := exec.Command(agenttest.Binary(), "--version").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Errorf("--version: %q, %v", out, err)
	}
	config := filepath.Join(t.TempDir(), "agent.json")
	if err := os.WriteFile(config, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(agenttest.Binary(), "--config", config, "--listen", "tcp:1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unix:PATH or vsock:PORT") {
		t.Errorf("bad --listen: %q, %v", out, err)
	}
}

// A config the agent cannot use is never replaced by another: the agent
// exits saying why (in a VM, on the console, which the host's start
// reports), rather than serve without the mounts, user and idle timeout it
// was given.
func TestBadConfigIsRefused(t *testing.T) {
	for _, tt := range []struct {
		name, config, want string
	}{
		{"env entry without =", `{"env": ["PATH=/bin", "NOEQ"], "user": "nobody"}`, `"NOEQ" is not KEY=VALUE`},
		{"env entry with NUL", `{"env": ["A=b\u0000c"]}`, "NUL"},
		{"relative workdir", `{"workdir": "relative"}`, "workdir"},
		{"not JSON", `{"env": [`, "agent.json"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			config := filepath.Join(dir, "agent.json")
			if err := os.WriteFile(config, []byte(tt.config), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, agenttest.Binary(), "--config", config, "--listen", "unix:"+filepath.Join(dir, "s")).CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("the agent served with a config it cannot use: %s", out)
			}
			if err == nil || !strings.Contains(string(out), tt.want) || !strings.Contains(string(out), config) {
				t.Fatalf("agent: %v, %q; want it to exit saying %q about %s", err, out, tt.want, config)
			}
		})
	}
	t.Run("missing file given with --config", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "agent.json")
		out, err := exec.Command(agenttest.Binary(), "--config", missing, "--listen", "unix:"+filepath.Join(t.TempDir(), "s")).CombinedOutput()
		if err == nil || !strings.Contains(string(out), missing) {
			t.Fatalf("agent: %v, %q; want it to exit naming %s", err, out, missing)
		}
	})
}
