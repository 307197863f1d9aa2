package hostapi

import (
	"fmt"
	"strings"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/confine"
	"github.com/krunbox/krunbox/internal/secrets"
)

// Secret is a secret of a sandbox (see Config.Secrets): the guest
// environment variable Name, the host Source its value is read from at
// each start ("env:HOST_VAR" or "file:PATH"), and the Hosts it may be sent
// to ("api.example.com", "*.example.com").
type Secret struct {
	Name   string   `json:"name"`
	Source string   `json:"source"`
	Hosts  []string `json:"hosts"`
}

// SecretHelp is the syntax ParseSecret reads, for usage messages.
const SecretHelp = "NAME=env:HOST_VAR@host1,host2 or NAME=file:PATH@host1,host2 (a host may be *.domain)"

// ParseSecret parses NAME=env:HOST_VAR@host1,host2 or
// NAME=file:PATH@host1,host2, as "krunbox create --secret" takes it.
func ParseSecret(s string) (Secret, error) {
	sp, err := secrets.Parse(s)
	return Secret(sp), err
}

// String gives the secret as ParseSecret reads it (its source, never its
// value).
func (s Secret) String() string { return secrets.Spec(s).String() }

// Check reads the secret's value from its source, as a start will, and
// says why it cannot be read; the value is not returned.
func (s Secret) Check() error {
	_, err := secrets.Spec(s).Read()
	return err
}

// specs converts the SDK's secrets to package secrets' own.
func specs(in []Secret) []secrets.Spec {
	out := make([]secrets.Spec, len(in))
	for i, s := range in {
		out[i] = secrets.Spec(s)
	}
	return out
}

// networkCarriesSecrets reports whether network n runs the host's network
// stack with a policy, where the secrets' hosts are intercepted: public and
// allow=RULES. Under tsi the guest's sockets are the host's and no request
// can be seen; under none there is no network; open is refused too, so
// that a secret is always paired with a network the user narrowed.
func networkCarriesSecrets(n Network) bool {
	return n == "public" || strings.HasPrefix(string(n), "allow=")
}

// validateSecrets checks c's secrets as far as no file system is involved.
func (c *Config) validateSecrets() []error {
	if len(c.Secrets) == 0 {
		return nil
	}
	var errs []error
	if err := secrets.ValidateAll(specs(c.Secrets)); err != nil {
		errs = append(errs, err)
	}
	if !networkCarriesSecrets(c.Network) {
		errs = append(errs, fmt.Errorf("secrets need network public or allow=RULES: under network %q the host cannot put their values in the guest's requests", c.Network))
	}
	for _, s := range c.Secrets {
		for _, e := range c.Env {
			if k, _, _ := strings.Cut(e, "="); k == s.Name {
				errs = append(errs, fmt.Errorf("secret %s is also set in env: give it one way", s.Name))
			}
		}
	}
	return errs
}

// prepareSecrets is the part of create that makes cfg's secrets: each file
// source resolved (and refused within a share), each value read once to
// say now when it cannot be, a placeholder per secret and the sandbox's
// CA, constrained to the secrets' hosts. It returns nil, nil without
// secrets.
func prepareSecrets(cfg *Config, mounts []Mount) (map[string]string, *secrets.CA, error) {
	if len(cfg.Secrets) == 0 {
		return nil, nil, nil
	}
	shared := make([]string, len(mounts))
	for i, m := range mounts {
		shared[i] = m.HostPath
	}
	placeholders := map[string]string{}
	var hosts []string
	for i, s := range cfg.Secrets {
		r, err := secrets.Spec(s).Resolve(shared)
		if err != nil {
			return nil, nil, err
		}
		cfg.Secrets[i] = Secret(r)
		placeholders[s.Name] = secrets.NewPlaceholder()
		hosts = append(hosts, s.Hosts...)
	}
	ca, err := secrets.NewCA(cfg.Name, hosts)
	if err != nil {
		return nil, nil, err
	}
	return placeholders, ca, nil
}

// placedSecrets returns the sandbox's secrets with their placeholders, each
// value checked readable now: a start whose secret cannot be read fails
// with that reason before the VM is made.
func (s *Sandbox) placedSecrets() ([]secrets.Placed, error) {
	var out []secrets.Placed
	for _, sp := range s.rec.Config.Secrets {
		ph := s.rec.Placeholders[sp.Name]
		if !secrets.ValidPlaceholder(ph) {
			return nil, fmt.Errorf("secret %s has no placeholder in %s (recreate the sandbox)", sp.Name, recordFile)
		}
		spec := secrets.Spec(sp)
		if _, err := spec.Read(); err != nil {
			return nil, err
		}
		out = append(out, secrets.Placed{Spec: spec, Placeholder: ph})
	}
	return out, nil
}

// addSecrets puts the sandbox's secrets into the VM spec and the agent's
// configuration: the placeholders in the guest's environment, the CA
// certificate for the guest's trust stores, and the secrets (sources and
// placeholders, never values) for the runner's network stack.
func (s *Sandbox) addSecrets(spec *vmm.Spec, ac *protocol.Config, cfg Config) error {
	placed, err := s.placedSecrets()
	if err != nil || len(placed) == 0 {
		return err
	}
	pem, err := confine.ReadFileNoSymlinks(s.path(secrets.CACertFile), 64<<10)
	if err != nil {
		return fmt.Errorf("the sandbox's secrets CA: %w", err)
	}
	env := make([]string, len(placed))
	for i, p := range placed {
		env[i] = p.Name + "=" + p.Placeholder
	}
	ac.Env = protocol.MergeEnv(s.rec.Image.Config.Env, env, cfg.Env)
	ac.CACert = string(pem)
	spec.Files = append(spec.Files, vmm.File{Path: protocol.CACertPath, Mode: 0o644, Data: pem})
	spec.Secrets = placed
	return nil
}
