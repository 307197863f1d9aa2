package oci

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
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
	tests := []struct{ in, name string }{
		{"alpine", "index.docker.io/library/alpine:latest"},
		{"alpine:3.20", "index.docker.io/library/alpine:3.20"},
		{"ghcr.io/o/i@sha256:" + strings.Repeat("a", 64), "ghcr.io/o/i@sha256:" + strings.Repeat("a", 64)},
		{"127.0.0.1:5000/x", "127.0.0.1:5000/x:latest"},
		{"oci:/tmp/l:v1", "oci:/tmp/l:v1"},
		{"oci:/tmp/l", "oci:/tmp/l"},
		{"docker-archive:/tmp/a.tar:alpine", "docker-archive:/tmp/a.tar:index.docker.io/library/alpine:latest"},
	}
	for _, tt := range tests {
		src, err := parseSource(tt.in)
		if err != nil || src.name != tt.name {
			t.Errorf("parseSource(%q) = %q, %v; want %q", tt.in, src.name, err, tt.name)
		}
	}
	for _, bad := range []string{"UPPER/case", "oci:", "docker-archive:", "a b", "docker-archive:/tmp/a.tar:UPPER"} {
		var re *ReferenceError
		if _, err := parseSource(bad); !errors.As(err, &re) || re.Ref != bad || !strings.Contains(re.Hint(), "alpine:3.20") {
			t.Errorf("parseSource(%q): %v, want a ReferenceError with examples in its hint", bad, err)
		}
	}
}

func TestRegistryErrorHint(t *testing.T) {
	dns := &url.Error{Op: "Get", URL: "https://nosuch.example/v2/", Err: &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "nosuch.example", IsNotFound: true}}}
	tests := []struct {
		name     string
		registry string
		err      error
		want     string // "" for no hint
	}{
		{"401", "ghcr.io", &transport.Error{StatusCode: http.StatusUnauthorized}, "log in with 'docker login ghcr.io' or 'podman login ghcr.io'"},
		{"403", "ghcr.io", fmt.Errorf("get: %w", &transport.Error{StatusCode: http.StatusForbidden}), "docker login ghcr.io"},
		{"401 from Docker Hub", name.DefaultRegistry, &transport.Error{StatusCode: http.StatusUnauthorized}, "'docker login docker.io'"},
		{"unknown host", "nosuch.example", dns, "check the registry name (nosuch.example) and the network; an image already in the cache needs no network: use --pull never"},
		{"connection refused", "127.0.0.1:1", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, "check the registry name (127.0.0.1:1)"},
		{"cancelled", "ghcr.io", &net.OpError{Op: "dial", Net: "tcp", Err: context.Canceled}, ""},
		{"404", "ghcr.io", &transport.Error{StatusCode: http.StatusNotFound}, ""},
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
