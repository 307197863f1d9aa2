package oci

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
)

// CredentialFunc returns the credentials stored under key: a repository
// (ghcr.io/owner/image), a registry (ghcr.io, 127.0.0.1:5000) or Docker
// Hub's legacy key https://index.docker.io/v1/. It returns
// auth.EmptyCredential when it has none.
type CredentialFunc func(ctx context.Context, key string) (auth.Credential, error)

// DefaultCredentials finds registry credentials the way docker and podman
// do: docker's config.json ($DOCKER_CONFIG/config.json, or else
// ~/.docker/config.json, and its credential helpers) first, then podman's
// auth files ($REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json,
// ~/.config/containers/auth.json), even when a docker config also exists.
// The files are read again at each call; a file that does not exist holds
// no credentials.
func DefaultCredentials(ctx context.Context, key string) (auth.Credential, error) {
	for _, path := range authFiles() {
		st, err := credentials.NewStore(path, credentials.StoreOptions{})
		if err != nil {
			return auth.EmptyCredential, fmt.Errorf("read registry credentials: %w", err)
		}
		cred, err := st.Get(ctx, key)
		if err != nil || cred != auth.EmptyCredential {
			return cred, err
		}
	}
	return auth.EmptyCredential, nil
}

// authFiles are the files DefaultCredentials reads, in order: docker's
// config, then podman's auth files (in docker's format).
func authFiles() []string {
	var files []string
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		files = append(files, filepath.Join(d, "config.json"))
	} else if home, err := os.UserHomeDir(); err == nil {
		files = append(files, filepath.Join(home, ".docker", "config.json"))
	}
	return append(files, podmanAuthFiles()...)
}

// podmanAuthFiles are podman's auth files, which use docker's format, in
// the order podman reads them.
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
