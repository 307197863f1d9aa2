//go:build linux

package guestagent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/krunbox/krunbox/guestagent/protocol"
)

// systemBundles are the CA bundles that TLS libraries read by default, as
// Go's crypto/x509 looks for them: Debian, Ubuntu, Alpine and Arch; Fedora
// and RHEL; openSUSE; OpenELEC; CentOS 7; Alpine's cert.pem.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// anchorDirs are where the distributions' CA tools (update-ca-certificates,
// update-ca-trust) take local CAs from when they rebuild the bundles: the
// CA is placed there too, so that a rebuild in the guest keeps it.
var anchorDirs = []string{
	"/usr/local/share/ca-certificates",
	"/etc/pki/ca-trust/source/anchors",
}

// anchorName is the CA's file name in anchorDirs.
const anchorName = "krunbox-sandbox.crt"

// installCA makes the guest trust the PEM certificate pem: it is appended
// to each system bundle in bundles that exists (once, however many names
// lead to it, and not again at the next boot), and the returned environment
// points OpenSSL, Python requests and Node at a bundle that holds it: the
// first system bundle it could extend, or certFile (the certificate
// alone, placed by the host) when there is none. A bundle it cannot extend
// is reported in err and skipped. The CA is also written into each of
// anchors that exists.
func installCA(pem []byte, bundles, anchors []string, certFile string) (env []string, err error) {
	if !bytes.HasSuffix(pem, []byte("\n")) {
		pem = append(pem, '\n')
	}
	var done []string
	var errs []error
	for _, d := range anchors {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue
		}
		if err := os.WriteFile(filepath.Join(d, anchorName), pem, 0o644); err != nil {
			errs = append(errs, fmt.Errorf("add the sandbox's CA to %s: %w", d, err))
		}
	}
	bundle := certFile
	for _, b := range bundles {
		real, err := filepath.EvalSymlinks(b)
		if err != nil || slices.Contains(done, real) {
			continue
		}
		fi, err := os.Stat(real)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		done = append(done, real)
		if err := appendOnce(real, pem); err != nil {
			errs = append(errs, fmt.Errorf("add the sandbox's CA to %s: %w", b, err))
			continue
		}
		if bundle == certFile {
			bundle = b
		}
	}
	return []string{
		"SSL_CERT_FILE=" + bundle,
		"REQUESTS_CA_BUNDLE=" + bundle,
		"NODE_EXTRA_CA_CERTS=" + certFile,
	}, errors.Join(errs...)
}

// appendOnce appends pem to the file p unless p holds it already.
func appendOnce(p string, pem []byte) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if bytes.Contains(data, pem) {
		return nil
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if len(data) > 0 && !bytes.HasSuffix(data, []byte("\n")) {
		pem = append([]byte("\n"), pem...)
	}
	_, err = f.Write(pem)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// setupTrust installs the config's CA, if any.
func (a *Agent) setupTrust() {
	if a.cfg.CACert == "" {
		return
	}
	env, err := installCA([]byte(a.cfg.CACert), systemBundles, anchorDirs, protocol.CACertPath)
	if err != nil {
		a.warn(err.Error())
	}
	a.trustEnv = env
}
