package secrets

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/krunbox/krunbox/internal/atomicfile"
	"github.com/krunbox/krunbox/internal/confine"
)

// Files of a sandbox's CA in its state directory.
const (
	CACertFile = "secrets-ca.pem"     // the certificate, which the guest trusts
	CAKeyFile  = "secrets-ca-key.pem" // its private key, mode 0600, never in the guest
)

// caValidity is how long a sandbox's CA is valid; leafValidity how long
// a certificate it issues is, reissued well before it ends.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 7 * 24 * time.Hour
)

// CA is a sandbox's certificate authority: it issues the certificates the
// interception presents to the guest. Its name constraints allow only the
// secrets' hosts, so even its key could not impersonate another name to a
// client that checks them (OpenSSL, Go, Node do).
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey

	leafKey *ecdsa.PrivateKey
	mu      sync.Mutex
	leaves  map[string]*tls.Certificate
}

// NewCA makes a new CA named after the sandbox (if named), constrained to the names
// that the hosts patterns match.
func NewCA(sandbox string, hosts []string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("secrets CA: %w", err)
	}
	var permitted []string
	for _, h := range hosts {
		// "a.b" permits a.b and the names below it; ".b" only those below.
		permitted = append(permitted, strings.TrimPrefix(normalizeHost(h), "*"))
	}
	cn := "krunbox secrets CA"
	if sandbox != "" {
		cn += " for sandbox " + sandbox
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:                randomSerial(),
		Subject:                     pkix.Name{CommonName: cn, Organization: []string{"krunbox"}},
		NotBefore:                   now.Add(-time.Hour),
		NotAfter:                    now.Add(caValidity),
		IsCA:                        true,
		BasicConstraintsValid:       true,
		MaxPathLenZero:              true,
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         permitted,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("secrets CA: %w", err)
	}
	return newCA(der, key)
}

func newCA(der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("secrets CA: %w", err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("secrets CA: %w", err)
	}
	return &CA{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:     key,
		leafKey: leafKey,
		leaves:  map[string]*tls.Certificate{},
	}, nil
}

// CertPEM is the CA certificate in PEM, for the guest's trust stores.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// Certificate is the CA certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Save writes the CA into dir: CACertFile (0644) and CAKeyFile (0600),
// each atomically.
func (ca *CA) Save(dir string) error {
	der, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return fmt.Errorf("save secrets CA: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	if err := atomicfile.Write(filepath.Join(dir, CAKeyFile), keyPEM, 0o600); err != nil {
		return fmt.Errorf("save secrets CA: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, CACertFile), ca.certPEM, 0o644); err != nil {
		return fmt.Errorf("save secrets CA: %w", err)
	}
	return nil
}

// LoadCA reads the CA that Save wrote into dir, an absolute path with no
// symlink in it.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := confine.ReadFileNoSymlinks(filepath.Join(dir, CACertFile), 64<<10)
	if err != nil {
		return nil, fmt.Errorf("load secrets CA: %w", err)
	}
	keyPEM, err := confine.ReadFileNoSymlinks(filepath.Join(dir, CAKeyFile), 64<<10)
	if err != nil {
		return nil, fmt.Errorf("load secrets CA: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || cb.Type != "CERTIFICATE" || kb == nil || kb.Type != "EC PRIVATE KEY" {
		return nil, fmt.Errorf("load secrets CA from %s: not the PEM files krunbox writes", dir)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("load secrets CA: %w", err)
	}
	ca, err := newCA(cb.Bytes, key)
	if err != nil {
		return nil, err
	}
	if !key.PublicKey.Equal(ca.cert.PublicKey) {
		return nil, fmt.Errorf("load secrets CA from %s: the key does not match the certificate", dir)
	}
	return ca, nil
}

// leaf returns a certificate for name signed by the CA, made once and
// reissued a day before it expires.
func (ca *CA) leaf(name string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[name]; ok && time.Until(c.Leaf.NotAfter) > 24*time.Hour {
		return c, nil
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &ca.leafKey.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("issue a certificate for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("issue a certificate for %s: %w", name, err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: ca.leafKey, Leaf: leaf}
	ca.leaves[name] = c
	return c, nil
}

func randomSerial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
