package hostapi

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependenciesStayLean: a program importing hostapi gets the SDK's
// dependencies, never the CLI's, and never docker/cli or logrus (package
// oci pulls with oras-go, not go-containerregistry's remote and authn,
// which import them).
func TestDependenciesStayLean(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go tool")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	cliOnly := []string{"github.com/spf13/", "github.com/creack/pty", "golang.org/x/term", "github.com/pelletier/go-toml",
		"github.com/krunbox/krunbox/cmd/", "github.com/krunbox/krunbox/internal/userconfig"}
	banned := []string{"github.com/docker/", "github.com/sirupsen/logrus",
		"github.com/google/go-containerregistry/pkg/authn", "github.com/google/go-containerregistry/pkg/v1/remote"}
	hasPrefix := func(s string, prefixes []string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(s, p) {
				return true
			}
		}
		return false
	}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		if hasPrefix(pkg, cliOnly) {
			t.Errorf("hostapi depends on %s, a dependency of the CLI only", pkg)
		}
		for _, imp := range imports {
			if hasPrefix(imp, banned) {
				t.Errorf("%s imports %s: the SDK must not depend on it", pkg, imp)
			}
		}
	}
}
