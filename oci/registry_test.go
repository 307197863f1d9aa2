package oci_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/oci"
)

// TestPullFromHostileRegistry pulls from a registry that lies about
// manifests and configs: each lie fails the pull with a clear error and
// leaves nothing in the cache; the honest registry then works.
func TestPullFromHostileRegistry(t *testing.T) {
	img := testimage.Image(t, "", testimage.Config{}, testimage.Layer(t, testimage.File("f", "x", 0o644)))
	imgDigest, _ := img.Digest()
	rawManifest, _ := img.RawManifest()
	m, _ := img.Manifest()
	rawConfig, _ := img.RawConfigFile()
	other := testimage.Image(t, "", testimage.Config{}, testimage.Layer(t, testimage.File("g", "y", 0o644)))
	otherManifest, _ := other.RawManifest()
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: ptr(oci.HostPlatform())}})

	// hugeConfig is the manifest with a config said to be 1 GiB.
	big := *m
	big.Config.Size = 1 << 30
	hugeConfig, _ := json.Marshal(big)

	serve := func(body []byte, digest string) func(http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", string(types.OCIManifestSchema1))
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			if digest != "" {
				w.Header().Set("Docker-Content-Digest", digest)
			}
			w.Write(body)
		}
	}
	tests := []struct {
		name  string
		index bool   // push the index rather than the image
		path  string // the path suffix the registry lies on
		lie   func(w http.ResponseWriter)
		want  string
	}{
		{"manifest not matching its digest header", false, "/manifests/latest",
			serve(otherManifest, imgDigest.String()), "digest"},
		{"manifest too large", false, "/manifests/latest",
			serve(append(bytes.Repeat([]byte(" "), 5<<20), rawManifest...), ""), "more than the"},
		{"manifest too large, streamed", false, "/manifests/latest", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", string(types.OCIManifestSchema1))
			w.Write(append(bytes.Repeat([]byte(" "), 5<<20), rawManifest...))
		}, "manifest"},
		{"config too large", false, "/manifests/latest",
			serve(hugeConfig, ""), "more than the"},
		{"config not matching its digest", false, "/blobs/" + m.Config.Digest.String(), func(w http.ResponseWriter) {
			c := bytes.Clone(rawConfig)
			c[len(c)-2] ^= 0x01
			w.Write(c)
		}, "config " + m.Config.Digest.String()},
		{"index entry answered with another manifest", true, "/manifests/" + imgDigest.String(),
			serve(otherManifest, ""), imgDigest.String()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var lying atomic.Bool
			reg, _ := countingRegistry(t, func(w http.ResponseWriter, r *http.Request) bool {
				if !lying.Load() || r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, tt.path) {
					return false
				}
				tt.lie(w)
				return true
			})
			var ref string
			if tt.index {
				ref = reg.Push(t, "hostile", "latest", idx)
			} else {
				ref = reg.Push(t, "hostile", "latest", img)
			}
			lying.Store(true)
			s := openStore(t)
			_, err := s.Pull(t.Context(), ref)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("pull: %v, want an error saying %q", err, tt.want)
			}
			t.Logf("pull: %v", err)
			checkClean(t, s, false)
			if list, _ := s.List(t.Context()); len(list) != 0 {
				t.Errorf("%d records after a failed pull", len(list))
			}
			lying.Store(false)
			if _, err := s.Pull(t.Context(), ref); err != nil {
				t.Fatalf("pull from the honest registry: %v", err)
			}
		})
	}
}

// TestRegistryRefusalText: the registry's refusal reads as it did with
// go-containerregistry (the error code in capitals), and gets the login
// hint.
func TestRegistryRefusalText(t *testing.T) {
	reg := testimage.NewRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}`))
		})
	})
	_, err := openStore(t).Pull(t.Context(), reg.Host+"/private/img:v1")
	var re *oci.RegistryError
	if !errors.As(err, &re) {
		t.Fatalf("pull: %v, want a RegistryError", err)
	}
	want := "GET http://" + reg.Host + "/v2/private/img/manifests/v1: DENIED: requested access to the resource is denied"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want it to say %q", err, want)
	}
	if !strings.Contains(re.Hint(), "docker login "+reg.Host) {
		t.Errorf("hint %q, want the login hint", re.Hint())
	}
}

func ptr[T any](v T) *T { return &v }
