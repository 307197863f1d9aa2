package hostapi

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
)

var validName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// ValidateName checks that name can name a sandbox: 1 to 63 letters,
// digits, '_', '.' or '-', starting with a letter or digit.
func ValidateName(name string) error {
	if !validName.MatchString(name) {
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
