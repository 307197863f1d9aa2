package vmm

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/hostapi/internal/fileevents"
	"github.com/krunbox/krunbox/internal/netstack"
)

func validSpec() *Spec {
	return &Spec{
		Root: Root{Dir: "/r"},
		Exec: Exec{Path: "/bin/sh", Args: []string{"-c", "true"}, Env: []string{"PATH=/bin"}},
	}
}

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(s *Spec)
		want   string // "" for valid
	}{
		{"valid", func(*Spec) {}, ""},
		{"overlay root", func(s *Spec) { s.Root = Root{Lower: "/l", Upper: "/u", Work: "/w", Merged: "/m"} }, ""},
		{"no root", func(s *Spec) { s.Root = Root{} }, "root: no directory"},
		{"both roots", func(s *Spec) { s.Root.Lower = "/l" }, "not several"},
		{"block root", func(s *Spec) { s.Root = Root{Image: "/i", Disk: "/d.img", DiskSize: 1 << 30} }, ""},
		{"block root and dir", func(s *Spec) { s.Root.Disk, s.Root.Image, s.Root.DiskSize = "/d.img", "/i", 1<<30 }, "not several"},
		{"block root without image", func(s *Spec) { s.Root = Root{Disk: "/d.img", DiskSize: 1 << 30} }, `root image "": want an absolute path`},
		{"block root without disk", func(s *Spec) { s.Root = Root{Image: "/i", DiskSize: 1 << 30} }, `root disk "": want an absolute path`},
		{"block root, relative disk", func(s *Spec) { s.Root = Root{Image: "/i", Disk: "d.img", DiskSize: 1 << 30} }, "absolute"},
		{"block root, odd size", func(s *Spec) { s.Root = Root{Image: "/i", Disk: "/d.img", DiskSize: 1000} }, "multiple of 512"},
		{"block root, no size", func(s *Spec) { s.Root = Root{Image: "/i", Disk: "/d.img"} }, "positive multiple of 512"},
		{"relative root", func(s *Spec) { s.Root.Dir = "r" }, "absolute"},
		{"comma in overlay path", func(s *Spec) { s.Root = Root{Lower: "/l,x", Upper: "/u", Work: "/w", Merged: "/m"} }, "overlayfs cannot take"},
		{"long tag", func(s *Spec) { s.Shares = []Share{{Tag: strings.Repeat("t", 37), HostPath: "/h"}} }, "want 1 to 36 bytes"},
		{"root tag", func(s *Spec) { s.Shares = []Share{{Tag: "/dev/root", HostPath: "/h"}} }, "share tag"},
		{"duplicate tag", func(s *Spec) { s.Shares = []Share{{Tag: "a", HostPath: "/h"}, {Tag: "a", HostPath: "/i"}} }, "used twice"},
		{"protected path in a share", func(s *Spec) {
			s.Shares = []Share{{Tag: "a", HostPath: "/h"}}
			s.Protect = []Protect{{Path: "/h/.git", Writable: true}, {Path: "/h/.git/hooks"}}
		}, ""},
		{"protected path outside the shares", func(s *Spec) {
			s.Shares = []Share{{Tag: "a", HostPath: "/h"}}
			s.Protect = []Protect{{Path: "/hh/.git/hooks"}}
		}, "not within a share"},
		{"unclean protected path", func(s *Spec) {
			s.Shares = []Share{{Tag: "a", HostPath: "/h"}}
			s.Protect = []Protect{{Path: "/h/x/../../etc"}}
		}, "clean absolute"},
		{"file events", func(s *Spec) {
			s.Shares = []Share{{Tag: "a", HostPath: "/h"}}
			s.FileEvents = &FileEvents{Socket: "/s/agent.sock", Shares: []fileevents.Share{{HostPath: "/h", GuestPath: "/w"}}}
		}, ""},
		{"file events of what is not shared", func(s *Spec) {
			s.Shares = []Share{{Tag: "a", HostPath: "/h"}}
			s.FileEvents = &FileEvents{Socket: "/s/agent.sock", Shares: []fileevents.Share{{HostPath: "/", GuestPath: "/w"}}}
		}, "/ is not a share"},
		{"file events to a relative guest path", func(s *Spec) {
			s.Shares = []Share{{Tag: "a", HostPath: "/h"}}
			s.FileEvents = &FileEvents{Socket: "/s/agent.sock", Shares: []fileevents.Share{{HostPath: "/h", GuestPath: "w"}}}
		}, "clean absolute"},
		{"no program", func(s *Spec) { s.Exec.Path = "" }, "no program"},
		{"space in program", func(s *Spec) { s.Exec.Path = "/bin/my prog" }, "spaces"},
		{"quote in argument", func(s *Spec) { s.Exec.Args = []string{`say "hi"`} }, `cannot pass '"'`},
		{"too many env entries", func(s *Spec) { s.Exec.Env = make([]string, MaxEnv+1) }, "environment entries"},
		{"env without =", func(s *Spec) { s.Exec.Env = []string{"PATH"} }, "KEY=VALUE"},
		{"dot in env key", func(s *Spec) { s.Exec.Env = []string{"a.b=c"} }, "KEY=VALUE"},
		{"command line too long", func(s *Spec) { s.Exec.Args = []string{strings.Repeat("x", MaxCommandLine)} }, "kernel command line"},
		{"relative workdir", func(s *Spec) { s.Workdir = "tmp" }, "workdir"},
		{"unknown rlimit", func(s *Spec) { s.Rlimits = []Rlimit{{Resource: "files", Cur: 1, Max: 1}} }, "unknown resource"},
		{"rlimit cur above max", func(s *Spec) { s.Rlimits = []Rlimit{{Resource: "nofile", Cur: 2, Max: 1}} }, "above max"},
		{"duplicate vsock port", func(s *Spec) { s.Vsock = []VsockPort{{Port: 1, HostPath: "/a"}, {Port: 1, HostPath: "/b"}} }, "mapped twice"},
		{"unknown network", func(s *Spec) { s.Network = "bridge" }, "network"},
		{"port map without network", func(s *Spec) { s.Network = NetworkNone; s.PortMap = []PortMapping{{Host: 80, Guest: 80}} }, "needs a network"},
		{"malformed network rule", func(s *Spec) { s.Network = "allow=exa mple.com" }, "not allowed in a host name"},
		{"unknown network", func(s *Spec) { s.Network = "wide" }, "want none, public"},
		{"negative network limit", func(s *Spec) { s.NetLimits.UDPFlows = -1 }, "UDPFlows"},
		{"port map address under tsi", func(s *Spec) { s.PortMap = []PortMapping{{HostIP: "0.0.0.0", Host: 80, Guest: 80}} }, "other than tsi"},
		{"port map bad address", func(s *Spec) {
			s.Network = NetworkPublic
			s.PortMap = []PortMapping{{HostIP: "localhost", Host: 80, Guest: 80}}
		}, "host address"},
		{"duplicate host port", func(s *Spec) { s.PortMap = []PortMapping{{Host: 80, Guest: 80}, {Host: 80, Guest: 81}} }, "mapped twice"},
		{"file without content", func(s *Spec) { s.Files = []File{{Path: "/f", Mode: 0o644}} }, "exactly one of source and data"},
		{"file with both", func(s *Spec) { s.Files = []File{{Path: "/f", Source: "/s", Data: []byte("x")}} }, "exactly one"},
		{"unclean file path", func(s *Spec) { s.Files = []File{{Path: "/a/../f", Data: []byte("x")}} }, "clean absolute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.change(s)
			err := s.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestSpecRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := validSpec()
	s.Files = []File{{Path: "/.krunbox/agent.json", Mode: 0o644, Data: []byte(`{"a":1}`)}}
	s.Rlimits = []Rlimit{{Resource: "nofile", Cur: 10, Max: 20}}
	s.PortMap = []PortMapping{{Host: 8080, Guest: 80}}
	s.NetLimits = netstack.Limits{TCPConns: 32, Buffer: 1 << 20}
	if err := WriteSpec(dir, s); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSpec(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("read back %+v, want %+v", got, s)
	}
	if rl := got.krunRlimits(); rl[0].Resource != 7 || rl[0].String() != "7=10:20" {
		t.Errorf("rlimits for libkrun: %v", rl)
	}
	if pm := got.portMap(); len(pm) != 1 || pm[0] != "8080:80" {
		t.Errorf("port map for libkrun: %v", pm)
	}
	if err := WriteSpec(dir, &Spec{}); err == nil {
		t.Error("WriteSpec stored an invalid spec")
	}
}

func TestProbeReportLoadHint(t *testing.T) {
	for _, tt := range []struct {
		r    ProbeReport
		want string
	}{
		{ProbeReport{LoadErr: "libkrun.so.1: cannot open shared object file"}, "install libkrun"},
		{ProbeReport{LoadErr: "built without cgo", NoCgo: true}, "CGO_ENABLED=1"},
	} {
		if got := tt.r.LoadHint(); !strings.Contains(got, tt.want) {
			t.Errorf("LoadHint of %+v = %q, want it to say %q", tt.r, got, tt.want)
		}
	}
}

func TestCrashSummary(t *testing.T) {
	exit2 := errors.New("exit status 2")
	for _, tt := range []struct {
		name, stderr, want string
	}{
		{"silent", "", "exit status 2, saying nothing"},
		{"message", "fatal: no memory\n\ngoroutine 1 [running]:\nmain.main()", "exit status 2: fatal: no memory"},
		{"abort alone", "SIGABRT: abort\nPC=0x0 m=0 sigcode=0\n\ngoroutine 0 [idle]:", "exit status 2: the library aborted the process (SIGABRT)"},
		{"abort with a message", "libkrun: bad state\nSIGABRT: abort\nPC=0x0\n\ngoroutine 0 [idle]:", "exit status 2: the library aborted the process (SIGABRT): libkrun: bad state"},
	} {
		if got := crashSummary(exit2, tt.stderr); got != tt.want {
			t.Errorf("%s: crashSummary = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestWatchedSharesExcludeProtected(t *testing.T) {
	spec := &Spec{
		Protect:    []Protect{{Path: "/ws/.git"}, {Path: "/ws/.git/config", Writable: true}},
		FileEvents: &FileEvents{Shares: []fileevents.Share{{HostPath: "/ws", GuestPath: "/ws"}}},
	}
	got := watchedShares(spec)
	if len(got) != 1 || !slices.Equal(got[0].Exclude, []string{"/ws/.git", "/ws/.git/config"}) {
		t.Errorf("watched shares %+v, want /ws without the protected paths", got)
	}
	if spec.FileEvents.Shares[0].Exclude != nil {
		t.Error("the spec's shares were changed")
	}
}
