package oci

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// TestCredentialKeys: credentials are looked up as docker and podman do,
// under the repository's key first, then the registry's (Docker Hub's being
// its legacy URL), and the first found wins.
func TestCredentialKeys(t *testing.T) {
	found := auth.Credential{Username: "u", Password: "p"}
	tests := []struct {
		ref      string
		hostport string
		have     string // the key the credentials are under
		wantKeys []string
	}{
		{"ghcr.io/owner/img:v1", "ghcr.io", "ghcr.io", []string{"ghcr.io/owner/img", "ghcr.io"}},
		{"ghcr.io/owner/img:v1", "ghcr.io", "ghcr.io/owner/img", []string{"ghcr.io/owner/img"}},
		{"alpine", "index.docker.io", "https://index.docker.io/v1/", []string{"index.docker.io/library/alpine", "https://index.docker.io/v1/"}},
		{"127.0.0.1:5000/img", "127.0.0.1:5000", "", []string{"127.0.0.1:5000/img", "127.0.0.1:5000"}},
	}
	for _, tt := range tests {
		t.Run(tt.ref+" "+tt.have, func(t *testing.T) {
			var keys []string
			s, err := Open(filepath.Join(t.TempDir(), "cache"), WithCredentials(func(_ context.Context, key string) (auth.Credential, error) {
				keys = append(keys, key)
				if key == tt.have {
					return found, nil
				}
				return auth.EmptyCredential, nil
			}))
			if err != nil {
				t.Fatal(err)
			}
			ref, err := name.ParseReference(tt.ref)
			if err != nil {
				t.Fatal(err)
			}
			repo := s.repository(ref)
			got, err := repo.Client.(*auth.Client).Credential(t.Context(), tt.hostport)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]auth.Credential{true: found, false: auth.EmptyCredential}[tt.have != ""]; got != want {
				t.Errorf("credential %+v, want %+v", got, want)
			}
			if !slices.Equal(keys, tt.wantKeys) {
				t.Errorf("looked up %q, want %q", keys, tt.wantKeys)
			}
			if wantPlain := tt.hostport == "127.0.0.1:5000"; repo.PlainHTTP != wantPlain {
				t.Errorf("PlainHTTP %v, want %v", repo.PlainHTTP, wantPlain)
			}
		})
	}
}
