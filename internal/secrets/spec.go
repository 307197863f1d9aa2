// Package secrets keeps a sandbox's API keys out of its guest: the guest
// sees each secret as a random placeholder, and the host puts the real
// value in place of the placeholder only in the HTTP requests the guest
// sends to that secret's hosts. HTTPS to those hosts is intercepted with a
// per-sandbox certificate authority that the guest trusts; the upstream's
// real certificate is verified on the host.
//
// A secret's value is never stored: a sandbox's record keeps its Spec (the
// source it is read from, env:VAR or file:PATH), and the value is read on
// the host at each start ([Spec.Read]).
package secrets

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/krunbox/krunbox/internal/confine"
)

// MaxValueSize bounds a secret's value: what is read of a file source.
const MaxValueSize = 64 << 10

// PlaceholderPrefix starts every placeholder.
const PlaceholderPrefix = "krunbox-secret-"

// Spec is one secret of a sandbox: the guest sees the environment variable
// Name set to a placeholder, which the host replaces with the value read
// from Source in requests to Hosts.
type Spec struct {
	// Name is the guest environment variable: letters, digits and '_',
	// not starting with a digit.
	Name string `json:"name"`
	// Source is where the host reads the value at each start: "env:VAR"
	// (the variable VAR of the process that starts the sandbox) or
	// "file:PATH" (an absolute host path, read with no symlink in any
	// component; Resolve resolves the ones given at create).
	Source string `json:"source"`
	// Hosts are the names the value is sent to: "api.example.com", or
	// "*.example.com" for every name below example.com. Not empty.
	Hosts []string `json:"hosts"`
}

// Help is the syntax of a secret flag, for usage messages.
const Help = "NAME=env:HOST_VAR@host1,host2 or NAME=file:PATH@host1,host2 (a host may be *.domain)"

// Parse parses NAME=env:VAR@HOST,... or NAME=file:PATH@HOST,... as given to
// "krunbox create --secret". A relative file path is made absolute, and
// one starting with ~/ is taken from the home directory. The result is
// validated.
func Parse(s string) (Spec, error) {
	name, rest, ok := strings.Cut(s, "=")
	at := strings.LastIndexByte(rest, '@')
	if !ok || at < 0 {
		return Spec{}, fmt.Errorf("secret %q: want %s", s, Help)
	}
	sp := Spec{Name: name, Source: rest[:at]}
	if hosts := rest[at+1:]; hosts != "" {
		sp.Hosts = strings.Split(hosts, ",")
	}
	if p, ok := strings.CutPrefix(sp.Source, "file:"); ok && p != "" && !filepath.IsAbs(p) {
		if rest, ok := strings.CutPrefix(p, "~/"); ok {
			home, err := os.UserHomeDir()
			if err != nil {
				return Spec{}, fmt.Errorf("secret %s: %w", name, err)
			}
			p = filepath.Join(home, rest)
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return Spec{}, fmt.Errorf("secret %s: %w", name, err)
		}
		sp.Source = "file:" + abs
	}
	if err := sp.Validate(); err != nil {
		return Spec{}, err
	}
	return sp, nil
}

// String is the spec in Parse's syntax. It holds no value.
func (s Spec) String() string {
	return s.Name + "=" + s.Source + "@" + strings.Join(s.Hosts, ",")
}

// Validate checks the spec's syntax: a valid name, a known source, a
// non-empty list of host names. It reads nothing.
func (s Spec) Validate() error {
	var errs []error
	if !validEnvName(s.Name) {
		errs = append(errs, fmt.Errorf("name %q: want letters, digits and '_', not starting with a digit", s.Name))
	}
	kind, arg, _ := strings.Cut(s.Source, ":")
	switch {
	case kind == "env" && validEnvName(arg):
	case kind == "env":
		errs = append(errs, fmt.Errorf("source %q: %q is no environment variable name", s.Source, arg))
	case kind == "file" && filepath.IsAbs(arg) && filepath.Clean(arg) == arg:
	case kind == "file":
		errs = append(errs, fmt.Errorf("source %q: want an absolute, clean file path", s.Source))
	default:
		errs = append(errs, fmt.Errorf("source %q: want env:HOST_VAR or file:PATH", s.Source))
	}
	if len(s.Hosts) == 0 {
		errs = append(errs, errors.New("no hosts: a secret needs the list of hosts it may be sent to"))
	}
	for _, h := range s.Hosts {
		if err := checkHostPattern(h); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("secret %s: %w", cmpOr(s.Name, "(no name)"), err)
	}
	return nil
}

// ValidateAll validates each spec and refuses a name given twice.
func ValidateAll(specs []Spec) error {
	var errs []error
	seen := map[string]bool{}
	for _, s := range specs {
		if err := s.Validate(); err != nil {
			errs = append(errs, err)
		}
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("secret %s is given twice", s.Name))
		}
		seen[s.Name] = true
	}
	return errors.Join(errs...)
}

// Resolve returns the spec with a file source's symlinks resolved, so that
// Read, which refuses any symlink, reads the file the user named; and
// checks that the value can be read now. It is what create does; a start
// only reads. A file within one of the directories in shared (the
// sandbox's shares, resolved) is refused: the guest could read it, or
// replace it with a link to another host file.
func (s Spec) Resolve(shared []string) (Spec, error) {
	if p, ok := strings.CutPrefix(s.Source, "file:"); ok {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return Spec{}, fmt.Errorf("secret %s: %w", s.Name, err)
		}
		for _, d := range shared {
			if real == d || strings.HasPrefix(real, strings.TrimSuffix(d, "/")+"/") {
				return Spec{}, fmt.Errorf("secret %s: %s is in %s, which the guest shares: keep secret files out of the workspace and mounts", s.Name, real, d)
			}
		}
		s.Source = "file:" + real
		s.Hosts = slices.Clone(s.Hosts)
	}
	if _, err := s.Read(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// Read reads the secret's value from its source: the environment variable,
// or the file (a regular file of at most MaxValueSize bytes, no symlink on
// its path; one trailing newline is dropped). The value must be non-empty
// and hold no NUL, CR or LF, since it is sent in HTTP headers. Errors never
// hold the value.
func (s Spec) Read() (string, error) {
	kind, arg, _ := strings.Cut(s.Source, ":")
	var v string
	switch kind {
	case "env":
		val, ok := os.LookupEnv(arg)
		if !ok {
			return "", fmt.Errorf("secret %s: the host environment variable %s is not set", s.Name, arg)
		}
		v = val
	case "file":
		b, err := confine.ReadFileNoSymlinks(arg, MaxValueSize)
		if err != nil {
			return "", fmt.Errorf("secret %s: %w", s.Name, err)
		}
		b = bytes.TrimSuffix(b, []byte("\n"))
		b = bytes.TrimSuffix(b, []byte("\r"))
		v = string(b)
	default:
		return "", fmt.Errorf("secret %s: source %q: want env:HOST_VAR or file:PATH", s.Name, s.Source)
	}
	switch {
	case v == "":
		return "", fmt.Errorf("secret %s: %s is empty", s.Name, s.Source)
	case strings.ContainsAny(v, "\x00\r\n"):
		return "", fmt.Errorf("secret %s: the value from %s holds a NUL byte or a line break, which an HTTP header cannot carry", s.Name, s.Source)
	}
	return v, nil
}

// NewPlaceholder returns a new random placeholder: PlaceholderPrefix and
// 128 random bits in hex, which the guest cannot guess and which appear in
// no request by chance.
func NewPlaceholder() string {
	var b [16]byte
	rand.Read(b[:])
	return PlaceholderPrefix + hex.EncodeToString(b[:])
}

// ValidPlaceholder reports whether p has the form NewPlaceholder makes.
func ValidPlaceholder(p string) bool {
	h, ok := strings.CutPrefix(p, PlaceholderPrefix)
	if !ok || len(h) != 32 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil && strings.ToLower(h) == h
}

func validEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, c := range []byte(s) {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// checkHostPattern accepts a DNS name or "*." and a DNS name with a dot.
func checkHostPattern(h string) error {
	name, wild := strings.CutPrefix(h, "*.")
	bad := func(why string) error { return fmt.Errorf("host %q: %s", h, why) }
	switch {
	case net.ParseIP(strings.Trim(name, "[]")) != nil:
		return bad("want a host name, not an address (HTTPS is verified against the name)")
	case strings.ContainsAny(name, ":/@ *"):
		return bad("want a bare host name such as api.example.com or *.example.com, with no scheme, port or path")
	case wild && !strings.Contains(name, "."):
		return bad("a wildcard needs a domain with a dot, such as *.example.com")
	case !validDNSName(name):
		return bad("not a valid host name")
	}
	return nil
}

func validDNSName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			if !(c == '-' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				return false
			}
		}
	}
	return true
}

// normalizeHost lowercases a host name and drops a trailing dot.
func normalizeHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// matchHost reports whether host matches pattern: equal names, or, for
// "*.domain", a name below domain (not domain itself).
func matchHost(pattern, host string) bool {
	pattern, host = normalizeHost(pattern), normalizeHost(host)
	if d, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(host, "."+d)
	}
	return pattern == host
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
