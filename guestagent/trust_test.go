//go:build linux

package guestagent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const testPEM = "-----BEGIN CERTIFICATE-----\nMIIBsandbox\n-----END CERTIFICATE-----"

func TestInstallCA(t *testing.T) {
	dir := t.TempDir()
	debian := filepath.Join(dir, "ca-certificates.crt")
	os.WriteFile(debian, []byte("-----BEGIN CERTIFICATE-----\nroot\n-----END CERTIFICATE-----"), 0o644) // no final newline
	alpine := filepath.Join(dir, "cert.pem")
	os.Symlink(debian, alpine)
	certFile := filepath.Join(dir, "ca.pem")
	bundles := []string{filepath.Join(dir, "missing.crt"), dir, debian, alpine}
	anchors := filepath.Join(dir, "local")
	os.Mkdir(anchors, 0o755)

	for boot := range 2 { // the root persists: a second boot adds nothing
		env, err := installCA([]byte(testPEM), bundles, []string{anchors, filepath.Join(dir, "no-such-dir")}, certFile)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"SSL_CERT_FILE=" + debian, "REQUESTS_CA_BUNDLE=" + debian, "NODE_EXTRA_CA_CERTS=" + certFile}
		if !slices.Equal(env, want) {
			t.Errorf("boot %d: env %q, want %q", boot, env, want)
		}
		data, _ := os.ReadFile(debian)
		if n := strings.Count(string(data), testPEM); n != 1 {
			t.Errorf("boot %d: the bundle holds the CA %d times, want once:\n%s", boot, n, data)
		}
		if !strings.Contains(string(data), "-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nMIIBsandbox") {
			t.Errorf("boot %d: the CA is not on its own line:\n%s", boot, data)
		}
		if b, err := os.ReadFile(filepath.Join(anchors, anchorName)); err != nil || string(b) != testPEM+"\n" {
			t.Errorf("boot %d: the CA in the anchors directory: %q, %v", boot, b, err)
		}
	}
}

func TestInstallCANoSystemBundle(t *testing.T) {
	dir := t.TempDir()
	certFile := filepath.Join(dir, "ca.pem")
	env, err := installCA([]byte(testPEM), []string{filepath.Join(dir, "none.crt")}, nil, certFile)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(env, "SSL_CERT_FILE="+certFile) {
		t.Errorf("env %q: want SSL_CERT_FILE at the CA alone", env)
	}
}

func TestInstallCAUnwritableBundle(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes read-only files")
	}
	dir := t.TempDir()
	ro, rw := filepath.Join(dir, "ro.crt"), filepath.Join(dir, "rw.crt")
	os.WriteFile(ro, []byte("x\n"), 0o444)
	os.WriteFile(rw, []byte("y\n"), 0o644)
	env, err := installCA([]byte(testPEM), []string{ro, rw}, nil, filepath.Join(dir, "ca.pem"))
	if err == nil || !strings.Contains(err.Error(), ro) {
		t.Errorf("err %v: want the read-only bundle named", err)
	}
	if !slices.Contains(env, "SSL_CERT_FILE="+rw) {
		t.Errorf("env %q: want the bundle that could be extended", env)
	}
}
