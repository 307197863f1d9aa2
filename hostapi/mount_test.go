package hostapi

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/guestagent/protocol"
)

func TestParseMount(t *testing.T) {
	tests := []struct {
		in      string
		want    Mount
		wantErr string
	}{
		{in: "/src", want: Mount{HostPath: "/src"}},
		{in: "/src:ro", want: Mount{HostPath: "/src", ReadOnly: true}},
		{in: "/src:rw", want: Mount{HostPath: "/src"}},
		{in: "/src:/dst", want: Mount{HostPath: "/src", GuestPath: "/dst"}},
		{in: "/src:/dst:ro", want: Mount{HostPath: "/src", GuestPath: "/dst", ReadOnly: true}},
		{in: "rel/dir:/dst", want: Mount{HostPath: "rel/dir", GuestPath: "/dst"}},
		{in: "/src:/dst:cached", want: Mount{HostPath: "/src", GuestPath: "/dst", Cached: true}},
		{in: "/src:cached", want: Mount{HostPath: "/src", Cached: true}},
		{in: "/src:/dst:ro,cached", want: Mount{HostPath: "/src", GuestPath: "/dst", ReadOnly: true, Cached: true}},
		{in: "/src:/dst:cached,consistent", want: Mount{HostPath: "/src", GuestPath: "/dst"}}, // the last wins
		{in: "/src:/dst:consistent", want: Mount{HostPath: "/src", GuestPath: "/dst"}},
		{in: "/src:/dst:ro,delegated", wantErr: "want HOST[:GUEST][:ro]"},
		{in: "", wantErr: "empty host path"},
		{in: ":/dst", wantErr: "empty host path"},
		{in: "/src:", wantErr: "empty guest path"},
		{in: "/a:/b:/c", wantErr: "want HOST[:GUEST][:ro]"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseMount(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseMount(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseMount(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
			// String writes what ParseMount reads back.
			if back, err := ParseMount(got.String()); err != nil || back != got {
				t.Errorf("ParseMount(%q) (String of %+v) = %+v, %v", got.String(), got, back, err)
			}
		})
	}
}

func TestResolveMounts(t *testing.T) {
	root := t.TempDir()
	root, _ = filepath.EvalSymlinks(root)
	a := filepath.Join(root, "a")
	b := filepath.Join(root, "b")
	file := filepath.Join(root, "file")
	link := filepath.Join(root, "link")
	for _, d := range []string{a, b, filepath.Join(a, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		in      []Mount
		want    []Mount
		wantErr string
	}{
		{name: "same path by default", in: []Mount{{HostPath: a}}, want: []Mount{{HostPath: a, GuestPath: a}}},
		{name: "symlink resolved", in: []Mount{{HostPath: link, GuestPath: "/w/"}}, want: []Mount{{HostPath: a, GuestPath: "/w"}}},
		{name: "read-only kept", in: []Mount{{HostPath: a, ReadOnly: true}, {HostPath: b, GuestPath: "/b"}}, want: []Mount{{HostPath: a, GuestPath: a, ReadOnly: true}, {HostPath: b, GuestPath: "/b"}}},
		{name: "missing host dir", in: []Mount{{HostPath: filepath.Join(root, "nope")}}, wantErr: "no such file"},
		{name: "file", in: []Mount{{HostPath: file}}, wantErr: "not a directory"},
		{name: "relative guest", in: []Mount{{HostPath: a, GuestPath: "w"}}, wantErr: "not absolute"},
		{name: "root", in: []Mount{{HostPath: a, GuestPath: "/"}}, wantErr: "shadow /"},
		{name: "proc", in: []Mount{{HostPath: a, GuestPath: "/proc"}}, wantErr: "shadow /proc"},
		{name: "under sys", in: []Mount{{HostPath: a, GuestPath: "/sys/fs/x"}}, wantErr: "shadow /sys"},
		{name: "dev via dots", in: []Mount{{HostPath: a, GuestPath: "/tmp/../dev"}}, wantErr: "shadow /dev"},
		{name: "krunbox dir", in: []Mount{{HostPath: a, GuestPath: protocol.GuestDir + "/x"}}, wantErr: "shadow " + protocol.GuestDir},
		{name: "devices is fine", in: []Mount{{HostPath: a, GuestPath: "/devices"}}, want: []Mount{{HostPath: a, GuestPath: "/devices"}}},
		{name: "duplicate", in: []Mount{{HostPath: a, GuestPath: "/x"}, {HostPath: b, GuestPath: "/x"}}, wantErr: "overlap"},
		{name: "nested", in: []Mount{{HostPath: a}, {HostPath: filepath.Join(a, "sub")}}, wantErr: "overlap"},
		{name: "nested other order", in: []Mount{{HostPath: b, GuestPath: "/x/y"}, {HostPath: a, GuestPath: "/x"}}, wantErr: "overlap"},
		{name: "siblings with common prefix", in: []Mount{{HostPath: a, GuestPath: "/x"}, {HostPath: b, GuestPath: "/xy"}}, want: []Mount{{HostPath: a, GuestPath: "/x"}, {HostPath: b, GuestPath: "/xy"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolveMounts(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalidMount) {
					t.Fatalf("error = %v, want an invalid-mount error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("resolveMounts = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestMountTagFitsLibkrun(t *testing.T) {
	if n := len(mountTag(1 << 20)); n > 36 {
		t.Fatalf("tag of %d bytes; libkrun allows 36", n)
	}
	if mountTag(0) == mountTag(1) {
		t.Fatal("tags are not distinct")
	}
}

// TestRefuseExposureResolvesMissingDirs: krunbox's directories may not
// exist yet (the configuration directory before its first use) behind a
// symlink on the way (~/.config -> /elsewhere/config), or be a dangling
// symlink; a share holding where they would be made is refused all the
// same, or the guest would write krunbox's and the pi extension's user
// configuration (fallback = "host", trusted_projects) there.
func TestRefuseExposureResolvesMissingDirs(t *testing.T) {
	base, _ := filepath.EvalSymlinks(t.TempDir())
	elsewhere := mkdir(t, filepath.Join(base, "elsewhere"))
	mkdir(t, filepath.Join(elsewhere, "config"))
	other := mkdir(t, filepath.Join(elsewhere, "other"))
	far := mkdir(t, filepath.Join(base, "far"))
	home := mkdir(t, filepath.Join(base, "home"))
	mkdir(t, filepath.Join(home, ".local", "state"))
	for _, l := range [][2]string{
		{filepath.Join(elsewhere, "config"), filepath.Join(home, ".config")},
		{filepath.Join(far, "kb"), filepath.Join(home, ".local", "state", "krunbox")}, // dangling
		{filepath.Join(base, "loop2"), filepath.Join(base, "loop1")},
		{filepath.Join(base, "loop1"), filepath.Join(base, "loop2")},
	} {
		if err := os.Symlink(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	own := []ownDir{
		{"configuration directory", filepath.Join(home, ".config", "krunbox")},
		{"state directory", filepath.Join(home, ".local", "state", "krunbox")},
		{"image cache", filepath.Join(base, "loop1", "krunbox")},
	}
	tests := []struct {
		name  string
		mount string
		what  string // "": accepted
	}{
		{"the target of the symlink on the way", elsewhere, "configuration directory"},
		{"the directory it would be made in", filepath.Join(elsewhere, "config"), "configuration directory"},
		{"where a dangling symlink points", far, "state directory"},
		{"the home holding them", home, "configuration directory"},
		{"a sibling", other, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := refuseExposure([]Mount{{HostPath: tt.mount, GuestPath: "/m"}}, own)
			if tt.what == "" {
				if err != nil {
					t.Fatalf("refuseExposure(%s) = %v, want nil", tt.mount, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidMount) || !strings.Contains(err.Error(), tt.what) {
				t.Fatalf("refuseExposure(%s) = %v, want a refusal naming the %s", tt.mount, err, tt.what)
			}
		})
	}
}

// TestOwnDirsHoldWhatThePiExtensionTrusts: the pi extension trusts its
// user configuration file and pi's agent directory (trust.json, pi's
// settings and extensions); no share may hold them.
func TestOwnDirsHoldWhatThePiExtensionTrusts(t *testing.T) {
	base, _ := filepath.EvalSymlinks(t.TempDir())
	h, err := NewHost(WithDirs(Dirs{State: filepath.Join(base, "s"), Cache: filepath.Join(base, "c"), Config: filepath.Join(base, "k")}))
	if err != nil {
		t.Fatal(err)
	}
	agent := mkdir(t, filepath.Join(base, "pi", "agent"))
	conf := filepath.Join(mkdir(t, filepath.Join(base, "piconf")), "pi.toml")
	t.Setenv("PI_CODING_AGENT_DIR", agent)
	t.Setenv("KRUNBOX_PI_CONFIG", conf)
	for _, tt := range []struct{ mount, what string }{
		{filepath.Join(base, "pi"), "pi agent directory"},
		{filepath.Dir(conf), "pi extension's configuration file"},
	} {
		if err := refuseExposure([]Mount{{HostPath: tt.mount}}, h.ownDirs()); !errors.Is(err, ErrInvalidMount) || !strings.Contains(err.Error(), tt.what) {
			t.Errorf("refuseExposure(%s) = %v, want a refusal naming the %s", tt.mount, err, tt.what)
		}
	}
	t.Setenv("PI_CODING_AGENT_DIR", "")
	t.Setenv("HOME", base)
	if err := refuseExposure([]Mount{{HostPath: filepath.Join(base, ".pi")}}, h.ownDirs()); !errors.Is(err, ErrInvalidMount) {
		t.Errorf("a share of ~/.pi: %v, want a refusal", err)
	}
}
