package vmm

import (
	"log/slog"

	"github.com/krunbox/krunbox/internal/netstack"
	"github.com/krunbox/krunbox/internal/secrets"
)

// secretsInterceptor returns the TLS interception of the sandbox's secrets
// in dir, plugged into the network stack, or nil when spec has none: the
// values are read on the host, from their sources, at each start.
func secretsInterceptor(dir string, spec *Spec, log *slog.Logger) (netstack.Interceptor, error) {
	if len(spec.Secrets) == 0 {
		return nil, nil // a nil *secrets.Proxy in the interface would not be nil
	}
	return secrets.Load(dir, spec.Secrets, log)
}
