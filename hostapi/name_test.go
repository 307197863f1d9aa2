package hostapi

import (
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "my-box", "pi_proj.1", "A9", strings.Repeat("x", 63)} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "-x", ".x", "a/b", "..", "a b", "é", strings.Repeat("x", 64)} {
		if err := ValidateName(bad); err == nil {
			t.Errorf("ValidateName(%q) = nil, want an error", bad)
		}
	}
}

func TestGenerateName(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		n := generateName()
		if err := ValidateName(n); err != nil {
			t.Fatal(err)
		}
		if seen[n] {
			t.Fatalf("generated %q twice", n)
		}
		seen[n] = true
	}
}
