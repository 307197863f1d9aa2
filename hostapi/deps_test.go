package hostapi

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependenciesStayLean: a program importing hostapi gets the SDK's
// dependencies, never the CLI's; and docker/cli with logrus only through
// the two importers known to need them: go-containerregistry's pkg/authn
// (its default keychain lives in the same package as the authenticators its
// registry client takes, so any registry pull brings them) and package
// oci's reader of podman's auth files, which are in docker's format. A new
// importer of them fails here.
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
	heavy := []string{"github.com/docker/", "github.com/sirupsen/logrus"}
	knownImporters := map[string]bool{
		"github.com/google/go-containerregistry/pkg/authn": true,
		"github.com/krunbox/krunbox/oci":                   true,
	}
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
		if hasPrefix(pkg, heavy) || knownImporters[pkg] {
			continue
		}
		for _, imp := range imports {
			if hasPrefix(imp, heavy) {
				t.Errorf("%s imports %s: the SDK would depend on it for a new reason", pkg, imp)
			}
		}
	}
}
