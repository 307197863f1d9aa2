package oci

import (
	"net/http"
	"strings"
	"testing"
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
	for _, bad := range []string{"UPPER/case", "oci:", "docker-archive:", "a b"} {
		if _, err := parseSource(bad); err == nil {
			t.Errorf("parseSource(%q) succeeded", bad)
		}
	}
}
