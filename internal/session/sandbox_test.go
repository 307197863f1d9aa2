package session

import (
	"slices"
	"testing"
	"time"

	"github.com/krunbox/krunbox/hostapi"
)

func TestConfigDiff(t *testing.T) {
	base := hostapi.Config{Image: "a", Workspace: "/w", Network: "tsi", CPUs: 2, MemoryMiB: 2048, Env: []string{"B=2", "A=1"},
		Mounts: []hostapi.Mount{{HostPath: "/h"}}, Labels: map[string]string{"k": "v"}}
	with := func(f func(*hostapi.Config)) hostapi.Config {
		c := base
		c.Env = slices.Clone(base.Env)
		f(&c)
		return c
	}
	tests := []struct {
		name string
		want hostapi.Config
		keys []string
	}{
		{"same, env in another order, mount guest path spelled out", with(func(c *hostapi.Config) {
			c.Env = []string{"A=1", "B=2"}
			c.Mounts = []hostapi.Mount{{HostPath: "/h/", GuestPath: "/h"}}
		}), nil},
		{"workspace", with(func(c *hostapi.Config) { c.Workspace = "/other" }), []string{"workspace"}},
		{"image and network", with(func(c *hostapi.Config) { c.Image, c.Network = "b", "none" }), []string{"image", "network"}},
		{"read-only mount", with(func(c *hostapi.Config) { c.Mounts = []hostapi.Mount{{HostPath: "/h", ReadOnly: true}} }), []string{"mounts"}},
		{"resources", with(func(c *hostapi.Config) { c.CPUs, c.MemoryMiB = 1, 512 }), []string{"cpus", "memoryMiB"}},
		{"env, idle, labels", with(func(c *hostapi.Config) {
			c.Env, c.IdleTimeout, c.Labels = []string{"A=1"}, time.Second, nil
		}), []string{"env", "idleTimeoutSec", "labels"}},
		{"secrets", with(func(c *hostapi.Config) {
			c.Secrets = []hostapi.Secret{{Name: "K", Source: "env:K", Hosts: []string{"a.example"}}}
		}), []string{"secrets"}},
	}
	for _, tt := range tests {
		if got := ConfigDiff(base, tt.want); !slices.Equal(got, tt.keys) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.keys)
		}
	}
}
