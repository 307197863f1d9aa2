package oci_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/oci"
)

// TestPullWithCredentialFiles pulls from a registry that wants basic auth,
// with the credentials in each of the files docker and podman write, and
// from the credential helpers docker's config names.
func TestPullWithCredentialFiles(t *testing.T) {
	const user, pass = "krunbox", "s3cret"
	var locked atomic.Bool
	reg := testimage.NewRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); locked.Load() && (!ok || u != user || p != pass) {
				w.Header().Set("WWW-Authenticate", `Basic realm="krunbox test"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	img := testimage.Image(t, "", testimage.Config{}, testimage.Layer(t, testimage.File("secret-image", "yes", 0o644)))
	ref := reg.Push(t, "private/img", "v1", img)
	locked.Store(true)

	authFile := func(password string) []byte {
		auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
		return []byte(`{"auths": {"` + reg.Host + `": {"auth": "` + auth + `"}}}`)
	}
	// helperConfig names the credential helper krunboxtest, whose script
	// is put on PATH, for the registry (credHelpers) or all (credsStore).
	helperConfig := func(credsStore bool) []byte {
		if credsStore {
			return []byte(`{"credsStore": "krunboxtest"}`)
		}
		return []byte(`{"credHelpers": {"` + reg.Host + `": "krunboxtest"}}`)
	}
	tests := []struct {
		name string
		// file is where the credentials go, relative to a temporary
		// directory; env points to it (as "$DIR/...").
		file, password string
		env            map[string]string
		// content replaces the credentials in the file.
		content []byte
		// helper, when set, is the password the credential helper gives.
		helper  string
		noHome  bool
		wantErr bool
	}{
		{name: "no credentials", wantErr: true},
		{name: "DOCKER_CONFIG", file: "docker/config.json", password: pass, env: map[string]string{"DOCKER_CONFIG": "$DIR/docker"}},
		{name: "DOCKER_CONFIG, wrong password", file: "docker/config.json", password: "wrong", env: map[string]string{"DOCKER_CONFIG": "$DIR/docker"}, wantErr: true},
		{name: "REGISTRY_AUTH_FILE (podman)", file: "podman-auth.json", password: pass, env: map[string]string{"REGISTRY_AUTH_FILE": "$DIR/podman-auth.json"}},
		{name: "XDG_RUNTIME_DIR/containers/auth.json (podman)", file: "run/containers/auth.json", password: pass, env: map[string]string{"XDG_RUNTIME_DIR": "$DIR/run"}},
		{name: "~/.config/containers/auth.json (podman)", file: "home/.config/containers/auth.json", password: pass},
		{name: "~/.docker/config.json", file: "home/.docker/config.json", password: pass},
		{name: "credHelpers", file: "home/.docker/config.json", content: helperConfig(false), helper: pass},
		{name: "credsStore", file: "home/.docker/config.json", content: helperConfig(true), helper: pass},
		{name: "credHelpers, wrong password", file: "home/.docker/config.json", content: helperConfig(false), helper: "wrong", wantErr: true},
		{name: "no HOME", noHome: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, k := range []string{"DOCKER_CONFIG", "REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME"} {
				t.Setenv(k, strings.ReplaceAll(tt.env[k], "$DIR", dir))
			}
			t.Setenv("HOME", filepath.Join(dir, "home"))
			if tt.noHome {
				t.Setenv("HOME", "")
			}
			if tt.helper != "" {
				bin := filepath.Join(dir, "bin")
				script := "#!/bin/sh\n[ \"$1\" = get ] || exit 1\ncat >/dev/null\n" +
					`echo '{"ServerURL":"` + reg.Host + `","Username":"` + user + `","Secret":"` + tt.helper + `"}'` + "\n"
				if err := os.MkdirAll(bin, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(bin, "docker-credential-krunboxtest"), []byte(script), 0o700); err != nil {
					t.Fatal(err)
				}
				t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			}
			if tt.file != "" {
				p := filepath.Join(dir, tt.file)
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				content := tt.content
				if content == nil {
					content = authFile(tt.password)
				}
				if err := os.WriteFile(p, content, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := openStore(t).Pull(t.Context(), ref)
			if tt.wantErr {
				var re *oci.RegistryError
				if !errors.As(err, &re) || !strings.Contains(err.Error(), "UNAUTHORIZED") {
					t.Fatalf("pull: %v, want an UNAUTHORIZED RegistryError", err)
				}
				for _, want := range []string{"docker login " + reg.Host, "podman login " + reg.Host, "$DOCKER_CONFIG", "$REGISTRY_AUTH_FILE", "containers/auth.json"} {
					if !strings.Contains(re.Hint(), want) {
						t.Errorf("hint %q does not say %q", re.Hint(), want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("pull: %v", err)
			}
			if b, err := os.ReadFile(filepath.Join(got.Rootfs, "secret-image")); err != nil || string(b) != "yes" {
				t.Errorf("pulled tree: %q, %v", b, err)
			}
		})
	}
}

// TestPullWithBearerToken pulls from a registry that hands out bearer
// tokens from a token endpoint, as Docker Hub and ghcr.io do: with the
// user's credentials the token endpoint gives a token and the pull works;
// without them it refuses, and the pull fails with the login hint.
func TestPullWithBearerToken(t *testing.T) {
	const user, pass, token = "krunbox", "s3cret", "tok3n"
	var locked atomic.Bool
	var host string
	reg := testimage.NewRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			unauthorized := func() {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
			}
			switch {
			case r.URL.Path == "/token":
				if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
					unauthorized()
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(`{"token":"` + token + `"}`))
			case locked.Load() && r.Header.Get("Authorization") != "Bearer "+token:
				w.Header().Set("WWW-Authenticate", `Bearer realm="http://`+host+`/token",service="test",scope="repository:private/img:pull"`)
				unauthorized()
			default:
				h.ServeHTTP(w, r)
			}
		})
	})
	host = reg.Host
	img := testimage.Image(t, "", testimage.Config{}, testimage.Layer(t, testimage.File("secret-image", "yes", 0o644)))
	ref := reg.Push(t, "private/img", "v1", img)
	locked.Store(true)

	for _, tt := range []struct {
		name    string
		config  string
		wantErr bool
	}{
		{name: "credentials", config: `{"auths": {"` + reg.Host + `": {"auth": "` + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)) + `"}}}`},
		{name: "no credentials", config: `{}`, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("DOCKER_CONFIG", dir)
			t.Setenv("HOME", dir)
			t.Setenv("REGISTRY_AUTH_FILE", "")
			t.Setenv("XDG_RUNTIME_DIR", "")
			t.Setenv("XDG_CONFIG_HOME", "")
			if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(tt.config), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := openStore(t).Pull(t.Context(), ref)
			if tt.wantErr {
				var re *oci.RegistryError
				if !errors.As(err, &re) || !strings.Contains(err.Error(), "UNAUTHORIZED") || !strings.Contains(re.Hint(), "docker login "+reg.Host) {
					t.Fatalf("pull: %v, want an UNAUTHORIZED RegistryError with the login hint", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("pull: %v", err)
			}
			if b, err := os.ReadFile(filepath.Join(got.Rootfs, "secret-image")); err != nil || string(b) != "yes" {
				t.Errorf("pulled tree: %q, %v", b, err)
			}
		})
	}
}
