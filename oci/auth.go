package oci

import (
	"context"
	"os"
	"path/filepath"

	"github.com/docker/cli/cli/config"
	"github.com/docker/cli/cli/config/types"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// DefaultKeychain finds registry credentials the way docker and podman do:
// docker's config.json (and its credential helpers) first, then podman's
// auth files ($REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json,
// ~/.config/containers/auth.json), even when a docker config also exists.
var DefaultKeychain authn.Keychain = authn.NewMultiKeychain(authn.DefaultKeychain, podmanKeychain{})

// podmanKeychain reads podman's auth files, which use docker's format.
type podmanKeychain struct{}

func podmanAuthFiles() []string {
	var files []string
	if f := os.Getenv("REGISTRY_AUTH_FILE"); f != "" {
		files = append(files, f)
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		files = append(files, filepath.Join(d, "containers", "auth.json"))
	}
	configDir := os.Getenv("XDG_CONFIG_HOME")
	if configDir == "" {
		if home, err := os.UserHomeDir(); err == nil {
			configDir = filepath.Join(home, ".config")
		}
	}
	if configDir != "" {
		files = append(files, filepath.Join(configDir, "containers", "auth.json"))
	}
	return files
}

func (podmanKeychain) Resolve(target authn.Resource) (authn.Authenticator, error) {
	return podmanKeychain{}.ResolveContext(context.Background(), target)
}

func (podmanKeychain) ResolveContext(_ context.Context, target authn.Resource) (authn.Authenticator, error) {
	for _, path := range podmanAuthFiles() {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		cf, err := config.LoadFromReader(f)
		f.Close()
		if err != nil {
			return nil, err
		}
		for _, key := range []string{target.String(), target.RegistryStr()} {
			if key == name.DefaultRegistry {
				key = authn.DefaultAuthKey
			}
			cfg, err := cf.GetAuthConfig(key)
			if err != nil {
				return nil, err
			}
			cfg.ServerAddress = ""
			if cfg != (types.AuthConfig{}) {
				return authn.FromConfig(authn.AuthConfig{
					Username:      cfg.Username,
					Password:      cfg.Password,
					Auth:          cfg.Auth,
					IdentityToken: cfg.IdentityToken,
					RegistryToken: cfg.RegistryToken,
				}), nil
			}
		}
	}
	return authn.Anonymous, nil
}
