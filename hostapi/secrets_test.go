package hostapi

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/internal/secrets"
)

func TestConfigValidateSecrets(t *testing.T) {
	ok := Secret{Name: "API_KEY", Source: "env:HOST_KEY", Hosts: []string{"api.example.com"}}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"tsi", Config{Image: "alpine", Network: NetworkTSI, Secrets: []Secret{ok}}, "need network public or allow="},
		{"none", Config{Image: "alpine", Network: NetworkNone, Secrets: []Secret{ok}}, "need network public or allow="},
		{"no hosts", Config{Image: "alpine", Secrets: []Secret{{Name: "A", Source: "env:B"}}}, "no hosts"},
		{"bad name", Config{Image: "alpine", Secrets: []Secret{{Name: "A-B", Source: "env:B", Hosts: []string{"a.example"}}}}, `name "A-B"`},
		{"twice", Config{Image: "alpine", Secrets: []Secret{ok, ok}}, "given twice"},
		{"also in env", Config{Image: "alpine", Env: []string{"API_KEY=x"}, Secrets: []Secret{ok}}, "also set in env"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestSecretsInGuestNotStored starts a sandbox with a secret on the test
// double: the guest sees the placeholder and trusts the sandbox's CA, and
// the value is nowhere in the sandbox's state directory, its record or
// its configuration. (The host's network stack, which puts the value in
// requests, is another package; the test double's TSI network carries no
// secrets, so the secret is added to a created sandbox the way Create
// makes it.)
func TestSecretsInGuestNotStored(t *testing.T) {
	h, ref := testHost(t)
	const value = "sk-live-TOP-SECRET-0123456789"
	t.Setenv("KRUNBOX_TEST_API_KEY", value)
	keyFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(keyFile, []byte(value+"-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sb, err := h.Create(t.Context(), Config{Name: "sec", Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Remove(context.Background()) })
	rec := sb.rec
	rec.Config.Secrets = []Secret{
		{Name: "API_KEY", Source: "env:KRUNBOX_TEST_API_KEY", Hosts: []string{"api.example.com"}},
		{Name: "GH_TOKEN", Source: "file:" + keyFile, Hosts: []string{"*.github.com"}},
	}
	ph, ca, err := prepareSecrets(&rec.Config, rec.Mounts)
	if err != nil {
		t.Fatal(err)
	}
	rec.Placeholders = ph
	if err := writeRecord(sb.Dir(), rec); err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(sb.Dir()); err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(t.Context()); err != nil {
		t.Fatal(err)
	}

	if got := run(t, sb, "sh", "-c", "echo $API_KEY"); got != ph["API_KEY"] || !secrets.ValidPlaceholder(got) {
		t.Errorf("guest API_KEY=%q, want the placeholder %q", got, ph["API_KEY"])
	}
	if got := run(t, sb, "sh", "-c", "echo $NODE_EXTRA_CA_CERTS $SSL_CERT_FILE $REQUESTS_CA_BUNDLE"); !strings.HasPrefix(got, protocol.CACertPath+" ") || strings.Count(got, " ") != 2 {
		t.Errorf("guest CA variables %q", got)
	}
	if got := run(t, sb, "sh", "-c", `cat "$SSL_CERT_FILE"`); !strings.Contains(got, strings.TrimSpace(string(ca.CertPEM()))) {
		t.Errorf("the guest's SSL_CERT_FILE lacks the sandbox's CA:\n%s", got)
	}
	if got := run(t, sb, "env"); strings.Contains(got, value) {
		t.Errorf("the guest's environment holds the value:\n%s", got)
	}
	if err := sb.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}

	// Nothing under the state directory holds either value: the record,
	// the VM spec, the agent's config, the logs, the console, the root.
	filepath.WalkDir(h.dirs.State, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(value)) {
			t.Errorf("%s holds the secret's value", p)
		}
		return nil
	})
	if fi, err := os.Stat(filepath.Join(sb.Dir(), secrets.CAKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("CA key: %v, %v; want mode 0600", fi, err)
	}
	got, err := h.Get("sec")
	if err != nil {
		t.Fatal(err)
	}
	if srcs := got.Config().Secrets; len(srcs) != 2 || srcs[0].Source != "env:KRUNBOX_TEST_API_KEY" || srcs[1].Source != "file:"+keyFile {
		t.Errorf("the record keeps %+v, want the sources", srcs)
	}

	// A value that cannot be read at start is a clear error, and no VM.
	os.Unsetenv("KRUNBOX_TEST_API_KEY")
	if err := got.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "KRUNBOX_TEST_API_KEY is not set") {
		t.Errorf("start without the host variable: %v", err)
	}
}
