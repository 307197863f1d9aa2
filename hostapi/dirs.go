package hostapi

import (
	"fmt"
	"os"
	"path/filepath"
)

// Dirs says where krunbox keeps its files.
type Dirs struct {
	// State holds sandboxes: <State>/sandboxes/<name>/.
	State string
	// Cache holds image blobs and flattened root filesystems.
	Cache string
	// Config holds the user configuration file, config.toml.
	Config string
}

// Sandboxes is the directory holding one directory per sandbox.
func (d Dirs) Sandboxes() string { return filepath.Join(d.State, "sandboxes") }

// DefaultDirs returns the directories krunbox uses. KRUNBOX_HOME, when set,
// puts everything under one directory (state/, cache/ and config/ inside
// it); otherwise the XDG base directories are used, each with a krunbox
// subdirectory.
func DefaultDirs() (Dirs, error) {
	if h := os.Getenv("KRUNBOX_HOME"); h != "" {
		abs, err := filepath.Abs(h)
		if err != nil {
			return Dirs{}, fmt.Errorf("KRUNBOX_HOME %q: %w", h, err)
		}
		return Dirs{
			State:  filepath.Join(abs, "state"),
			Cache:  filepath.Join(abs, "cache"),
			Config: filepath.Join(abs, "config"),
		}, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return Dirs{}, fmt.Errorf("find home directory: %w (set KRUNBOX_HOME)", err)
	}
	xdg := func(env, def string) string {
		if v := os.Getenv(env); filepath.IsAbs(v) {
			return filepath.Join(v, "krunbox")
		}
		return filepath.Join(home, def, "krunbox")
	}
	return Dirs{
		State:  xdg("XDG_STATE_HOME", filepath.Join(".local", "state")),
		Cache:  xdg("XDG_CACHE_HOME", ".cache"),
		Config: xdg("XDG_CONFIG_HOME", ".config"),
	}, nil
}
