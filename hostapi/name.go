package hostapi

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// ValidateName checks that name can name a sandbox: 1 to 63 letters,
// digits, '_', '.' or '-', starting with a letter or digit.
func ValidateName(name string) error {
	// A loop rather than a regexp: compiling one at init costs every
	// krunbox command about a millisecond.
	ok := len(name) >= 1 && len(name) <= 63
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		ok = alnum || i > 0 && (c == '_' || c == '.' || c == '-')
	}
	if !ok {
		return fmt.Errorf("invalid sandbox name %q: use 1 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit", name)
	}
	return nil
}

// generateName returns a fresh random sandbox name.
func generateName() string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand.Read never fails on supported platforms
	}
	return "kb-" + hex.EncodeToString(b[:])
}
