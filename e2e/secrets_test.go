package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Names of the secrets scenario's servers: the secret is for apiName only.
const (
	apiName   = "api.secrets.test"
	otherName = "other.secrets.test"
)

// testSecrets: a secret reaches its host in a header over HTTPS, stays a
// placeholder for another host, and is nowhere in the sandbox's state,
// inspect or logs.
func testSecrets(t *testing.T, e *env) {
	e.pull()
	// Malformed secrets, and a network that cannot carry them: exit 125,
	// before anything is made.
	checkKrunboxError(t, e.krunbox("create", "--secret", "API_KEY=env:X", image), "want NAME=env:HOST_VAR@host1,host2")
	checkKrunboxError(t, e.krunbox("create", "--net", "tsi", "--secret", "API_KEY=env:X@"+apiName, image), "need network public or allow=")

	cert, certFile := serverCert(t, apiName, otherName)
	var mu sync.Mutex
	got := map[string]string{} // Host -> Authorization
	// Port 443 on 127.0.0.4, which the stack's test hooks show the guest as
	// 198.51.100.4, a public address.
	l, err := net.Listen("tcp", "127.0.0.4:443")
	if err != nil {
		t.Skipf("SKIP: the HTTPS part needs port 443 on 127.0.0.4 (root): %v", err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got[r.Host] = r.Header.Get("Authorization")
			mu.Unlock()
			w.Write([]byte("ok"))
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
	}
	go srv.ServeTLS(l, "", "")
	t.Cleanup(func() { srv.Close() })
	w := newNetWorld(t, e)
	w.setName(apiName, "198.51.100.4")
	w.setName(otherName, "198.51.100.4")

	// The runner verifies upstreams against the host's roots: here, the
	// test server's certificate.
	const value = "sk-e2e-THE-REAL-VALUE-0123456789"
	e.extra = append(e.extra, "SSL_CERT_FILE="+certFile, "KRUNBOX_E2E_SECRET="+value)
	dir := e.started("sec", "--net", "allow="+apiName+","+otherName, "--secret", "API_KEY=env:KRUNBOX_E2E_SECRET@"+apiName)

	placeholder := strings.TrimSpace(e.ok("exec", "sec", "--", "sh", "-c", "echo $API_KEY"))
	if !strings.HasPrefix(placeholder, "krunbox-secret-") {
		t.Fatalf("guest API_KEY=%q, want a placeholder", placeholder)
	}
	// busybox's wget speaks no TLS that Go's servers accept: a Go client,
	// which trusts the CAs the agent set up (SSL_CERT_FILE).
	e.ok("cp", netprobe(t), "sec:/bin/netprobe")
	// The guest trusts the test server's certificate too (it sees it for
	// the host that is not intercepted), as it trusts public CAs.
	e.ok("exec", "sec", "--", "mkdir", "-p", "/tmp/certs")
	e.ok("cp", certFile, "sec:/tmp/certs/test.pem")
	for _, name := range []string{apiName, otherName} {
		r := e.krunbox("exec", "sec", "--", "sh", "-c", `SSL_CERT_DIR=/tmp/certs netprobe fetch https://`+name+`/ "Authorization: Bearer $API_KEY"`)
		if r.code != 0 || r.stdout != "ok" {
			t.Fatalf("%s: %s", name, r)
		}
	}
	mu.Lock()
	if got[apiName] != "Bearer "+value {
		t.Errorf("%s got Authorization %q, want the value", apiName, got[apiName])
	}
	if got[otherName] != "Bearer "+placeholder {
		t.Errorf("%s got Authorization %q, want the placeholder", otherName, got[otherName])
	}
	mu.Unlock()

	for _, out := range []string{e.ok("inspect", "sec"), e.krunbox("logs", "sec").stdout + e.krunbox("logs", "sec").stderr} {
		if strings.Contains(out, value) {
			t.Errorf("inspect or logs show the value:\n%s", out)
		}
	}
	e.ok("stop", "sec")
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if holds, err := fileHolds(p, []byte(value)); err != nil || holds {
				t.Errorf("%s holds the secret's value (%v)", p, err)
			}
		}
		return nil
	})
}

// fileHolds reports whether the file at p holds needle, reading only its
// data (a block root's disk is a sparse file of gigabytes), 1 MiB at a
// time.
func fileHolds(p string, needle []byte) (bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < fi.Size(); {
		data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return false, nil // only a hole is left
		}
		if err != nil {
			return false, err
		}
		hole, err := unix.Seek(int(f.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return false, err
		}
		// The extent, read with an overlap of len(needle)-1 bytes
		// from one chunk to the next.
		for pos := data; pos < hole; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), hole-pos)], pos)
			if n == 0 && err != nil {
				return false, err
			}
			if bytes.Contains(buf[:n], needle) {
				return true, nil
			}
			if pos+int64(n) >= hole {
				break
			}
			pos += int64(max(n-len(needle)+1, 1))
		}
		off = hole
	}
	return false, nil
}

// serverCert returns a self-signed certificate for names, and a PEM file
// holding it.
func serverCert(t testing.TB, names ...string) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "server.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, file
}
