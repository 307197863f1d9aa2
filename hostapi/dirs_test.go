package hostapi

import (
	"path/filepath"
	"testing"
)

func TestDefaultDirs(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Dirs
	}{
		{
			name: "KRUNBOX_HOME wins",
			env:  map[string]string{"KRUNBOX_HOME": "/kb", "XDG_STATE_HOME": "/xs", "HOME": "/home/u"},
			want: Dirs{State: "/kb/state", Cache: "/kb/cache", Config: "/kb/config"},
		},
		{
			name: "XDG variables",
			env:  map[string]string{"KRUNBOX_HOME": "", "XDG_STATE_HOME": "/xs", "XDG_CACHE_HOME": "/xc", "XDG_CONFIG_HOME": "/xf", "HOME": "/home/u"},
			want: Dirs{State: "/xs/krunbox", Cache: "/xc/krunbox", Config: "/xf/krunbox"},
		},
		{
			name: "defaults under HOME, relative XDG ignored",
			env:  map[string]string{"KRUNBOX_HOME": "", "XDG_STATE_HOME": "rel", "XDG_CACHE_HOME": "", "XDG_CONFIG_HOME": "", "HOME": "/home/u"},
			want: Dirs{State: "/home/u/.local/state/krunbox", Cache: "/home/u/.cache/krunbox", Config: "/home/u/.config/krunbox"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			got, err := DefaultDirs()
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("DefaultDirs() = %+v, want %+v", got, tt.want)
			}
			if got.Sandboxes() != filepath.Join(tt.want.State, "sandboxes") {
				t.Errorf("Sandboxes() = %q", got.Sandboxes())
			}
		})
	}
}
