package oci

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"oras.land/oras-go/v2/registry/remote/errcode"

	"github.com/krunbox/krunbox/internal/testutil/testimage"
)

type failTransport struct{ t *testing.T }

func (f failTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.t.Errorf("request to %s went out", r.URL)
	return nil, http.ErrHandlerTimeout
}

func TestPlainHTTPOnlyToLoopback(t *testing.T) {
	tr := loopbackOnlyHTTP{next: failTransport{t}}
	for _, u := range []string{"http://10.1.2.3:5000/v2/", "http://registry.local/v2/", "http://192.168.1.1/v2/"} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		if _, err := tr.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "refusing plain HTTP") {
			t.Errorf("%s: %v, want a refusal", u, err)
		}
	}
	for _, h := range []string{"localhost", "127.0.0.1", "::1", "127.0.0.53"} {
		if !isLoopback(h) {
			t.Errorf("%s is loopback", h)
		}
	}
}

func TestParseSource(t *testing.T) {
	dir := t.TempDir()
	tagged := testimage.WriteLayout(t, filepath.Join(dir, "tagged"), DefaultLayoutTag, empty.Image)
	v1Only := testimage.WriteLayout(t, filepath.Join(dir, "v1only"), "v1", empty.Image)
	tests := []struct{ in, name string }{
		{"alpine", "index.docker.io/library/alpine:latest"},
		{"alpine:3.20", "index.docker.io/library/alpine:3.20"},
		{"ghcr.io/o/i@sha256:" + strings.Repeat("a", 64), "ghcr.io/o/i@sha256:" + strings.Repeat("a", 64)},
		{"127.0.0.1:5000/x", "127.0.0.1:5000/x:latest"},
		{"docker://alpine", "index.docker.io/library/alpine:latest"},
		{"docker://docker.io/library/alpine:3.20", "index.docker.io/library/alpine:3.20"},
		{"docker://ghcr.io/o/i:v1", "ghcr.io/o/i:v1"},
		{"oci:/tmp/l:v1", "oci:/tmp/l:v1"},
		{"oci:/tmp/l", "oci:/tmp/l"},
		// A layout's image tagged latest has one name, written either way.
		{"oci:" + tagged, "oci:" + tagged + ":latest"},
		{"oci:" + tagged + ":latest", "oci:" + tagged + ":latest"},
		{"oci:" + v1Only, "oci:" + v1Only},
		{"oci:" + v1Only + ":v1", "oci:" + v1Only + ":v1"},
		{"docker-archive:/tmp/a.tar:alpine", "docker-archive:/tmp/a.tar:index.docker.io/library/alpine:latest"},
	}
	for _, tt := range tests {
		src, err := parseSource(tt.in)
		if err != nil || src.name != tt.name {
			t.Errorf("parseSource(%q) = %q, %v; want %q", tt.in, src.name, err, tt.name)
		}
	}
	for _, bad := range []string{"UPPER/case", "oci:", "docker-archive:", "a b", "docker-archive:/tmp/a.tar:UPPER", "docker://", "docker://UPPER"} {
		var re *ReferenceError
		if _, err := parseSource(bad); !errors.As(err, &re) || re.Ref != bad || !strings.Contains(re.Hint(), "alpine:3.20") {
			t.Errorf("parseSource(%q): %v, want a ReferenceError with examples in its hint", bad, err)
		}
	}
}

func TestParseSourceRefusesLocalPaths(t *testing.T) {
	dir := t.TempDir()
	testimage.WriteLayout(t, filepath.Join(dir, "build", "testimage"), DefaultLayoutTag, empty.Image)
	if err := os.WriteFile(filepath.Join(dir, "img.tar"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "alpine"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	tests := []struct {
		ref  string
		hint string // "" for a reference that is accepted
	}{
		{"./build/testimage", "write oci:./build/testimage"},
		{"build/testimage", "write oci:build/testimage (and docker-archive:FILE for a \"docker save\" tarball); for the registry image of that name, write docker.io/build/testimage"},
		{filepath.Join(dir, "build/testimage"), "write oci:" + filepath.Join(dir, "build/testimage")},
		{"/nonexistent/dir", "write oci:/nonexistent/dir"},
		{"../x", "write oci:../x"},
		{"~/images/x", "the shell did not expand ~"},
		{"img.tar", "write docker-archive:img.tar; for the registry image of that name, write docker.io/img.tar"},
		{"./img.tar", "write docker-archive:./img.tar"},
		// A directory that is no OCI layout does not shadow an image name.
		{"alpine", ""},
		{"build", ""},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			_, err := parseSource(tt.ref)
			if tt.hint == "" {
				if err != nil {
					t.Fatalf("parseSource(%q): %v", tt.ref, err)
				}
				return
			}
			var re *ReferenceError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), "local path") || !strings.Contains(re.Hint(), tt.hint) {
				t.Errorf("parseSource(%q): %v (hint %q); want a local-path error hinting %q", tt.ref, err, hintOf(re), tt.hint)
			}
		})
	}
}

func hintOf(e *ReferenceError) string {
	if e == nil {
		return ""
	}
	return e.Hint()
}

func TestRegistryErrorHint(t *testing.T) {
	dns := &url.Error{Op: "Get", URL: "https://nosuch.example/v2/", Err: &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "nosuch.example", IsNotFound: true}}}
	tests := []struct {
		name     string
		registry string
		err      error
		want     string // "" for no hint
	}{
		{"401", "ghcr.io", &errcode.ErrorResponse{StatusCode: http.StatusUnauthorized}, "log in with 'docker login ghcr.io' or 'podman login ghcr.io'"},
		{"403", "ghcr.io", fmt.Errorf("get: %w", &errcode.ErrorResponse{StatusCode: http.StatusForbidden}), "docker login ghcr.io"},
		{"401 from Docker Hub", name.DefaultRegistry, &errcode.ErrorResponse{StatusCode: http.StatusUnauthorized}, "'docker login docker.io'"},
		{"unknown host", "nosuch.example", dns, "check the registry name (nosuch.example) and the network; an image already in the cache needs no network: use --pull never"},
		{"connection refused", "127.0.0.1:1", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, "check the registry name (127.0.0.1:1)"},
		{"cancelled", "ghcr.io", &net.OpError{Op: "dial", Net: "tcp", Err: context.Canceled}, ""},
		{"404", "ghcr.io", &errcode.ErrorResponse{StatusCode: http.StatusNotFound}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := (&RegistryError{Ref: "x", Registry: tt.registry, Err: tt.err}).Hint()
			if tt.want == "" && h != "" || !strings.Contains(h, tt.want) {
				t.Errorf("hint %q, want %q", h, tt.want)
			}
		})
	}
}
