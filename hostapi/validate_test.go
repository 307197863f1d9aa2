package hostapi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	ws := t.TempDir()
	other := t.TempDir()
	file := filepath.Join(ws, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want string // "" for valid
	}{
		{"minimal", Config{Image: "alpine"}, ""},
		{"workspace and mount", Config{Image: "alpine", Workspace: ws, Mounts: []Mount{{HostPath: other, GuestPath: "/data", ReadOnly: true}}}, ""},
		{"no image", Config{}, "no image"},
		{"cpus", Config{Image: "alpine", CPUs: -1}, "cpus"},
		{"memory", Config{Image: "alpine", MemoryMiB: 64}, "memory"},
		{"network", Config{Image: "alpine", Network: "wide"}, "network"},
		{"missing workspace", Config{Image: "alpine", Workspace: filepath.Join(ws, "missing")}, "workspace"},
		{"workspace is a file", Config{Image: "alpine", Workspace: file}, "not a directory"},
		{"mount shadows /proc", Config{Image: "alpine", Mounts: []Mount{{HostPath: other, GuestPath: "/proc"}}}, "shadow /proc"},
		{"mount overlaps the workspace", Config{Image: "alpine", Workspace: ws, Mounts: []Mount{{HostPath: other, GuestPath: ws + "/sub"}}}, "overlap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate: %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
	// Validate changes nothing it was given.
	cfg := Config{Image: "alpine", Workspace: ws + "/."}
	if err := cfg.Validate(); err != nil || cfg.Workspace != ws+"/." || cfg.CPUs != 0 {
		t.Errorf("Validate: %v; cfg changed to %+v", err, cfg)
	}
}
