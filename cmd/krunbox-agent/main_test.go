//go:build linux

package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"strings"
	"testing"

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
	out, err = exec.Command(agenttest.Binary(), "--config", "/nonexistent", "--listen", "tcp:1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unix:PATH or vsock:PORT") {
		t.Errorf("bad --listen: %q, %v", out, err)
	}
}

func TestBadConfigIsReportedInHello(t *testing.T) {
	a := agenttest.Start(t, nil, agenttest.WithConfigJSON([]byte(`{"workdir": "relative"}`)))
	_, r := a.Hello(t, 1, 1)
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "workdir") || !strings.Contains(r.Warnings[0], "agent.json") {
		t.Fatalf("warnings %q, want the config error", r.Warnings)
	}
}
