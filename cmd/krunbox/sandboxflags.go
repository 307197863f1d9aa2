package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/internal/userconfig"
	"github.com/krunbox/krunbox/oci"
)

// loadConfig returns the user's configuration: defaults, config.toml, the
// KRUNBOX_* environment.
func loadConfig() (*userconfig.Config, string, error) {
	dirs, err := hostapi.DefaultDirs()
	if err != nil {
		return nil, "", err
	}
	c, err := userconfig.Load(dirs.Config, os.LookupEnv)
	if err != nil {
		return nil, "", withHint(err, "fix the file or the variable; 'krunbox config' shows the keys")
	}
	return c, dirs.Config, nil
}

// lifecycleConfig returns the configuration of the commands that start,
// stop or remove existing sandboxes, which use only its timeouts. A broken
// configuration is a warning there, and the defaults apply: it never keeps
// a sandbox from being started, stopped or removed.
func lifecycleConfig(s *streams) *userconfig.Config {
	uc, _, err := loadConfig()
	if err != nil {
		fmt.Fprintf(s.errOut, "krunbox: warning: %v; using the default timeouts\n", err)
		return userconfig.Defaults()
	}
	return uc
}

// newHost returns a Host on the default directories, with the start and
// stop timeouts of the configuration, printing pull progress on s.errOut.
func newHost(s *streams, uc *userconfig.Config) (*hostapi.Host, error) {
	pp := newProgressPrinter(s.errOut)
	return hostapi.NewHost(
		hostapi.WithStartTimeout(uc.StartTimeout),
		hostapi.WithStopTimeout(uc.StopTimeout),
		hostapi.WithPullProgress(func(p hostapi.PullProgress) { pp.print(ociProgress(p)) }))
}

// ociProgress is an SDK pull's progress as package oci reports it, for
// progressPrinter, which prints the pulls of both.
func ociProgress(p hostapi.PullProgress) oci.Progress {
	layer, _ := v1.NewHash(p.Layer)
	return oci.Progress{Image: p.Image, Layer: layer, Index: p.Index, Count: p.Count, Size: p.Size, Done: p.Done, State: oci.ProgressState(p.State)}
}

// sandboxFlags are the flags of the commands that make a sandbox (create,
// run). Those that have a configuration key override it.
type sandboxFlags struct {
	name      string
	mounts    []string
	workspace string
	isolate   bool
	workdir   string
	env       []string
	user      string
	ports     []string
	labels    []string
	secrets   []string
	// gitWritable is --git-writable, over the configuration's
	// git_writable.
	gitWritable bool
	// configured are the flags with a configuration key.
	configured []configFlag
}

// configFlag is a flag that overrides a configuration key.
type configFlag struct {
	key, flag string
	value     *string
}

func (f *sandboxFlags) register(cmd *cobra.Command, idle bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.name, "name", "", "name of the sandbox (default: generated)")
	fl.StringArrayVarP(&f.mounts, "volume", "v", nil, "share a host directory, live: HOST[:GUEST][:ro] or [:cached] or [:ro,cached] (GUEST defaults to the same path; -v . shares the current directory; cached: the guest may see host changes up to 5 s late, for a read-mostly cache)")
	fl.StringVar(&f.workspace, "workspace", "", "share DIR at the same absolute path and make it the working directory (with the git directories a worktree needs)")
	fl.BoolVar(&f.isolate, "isolate", false, "give the sandbox its own checkout of the workspace's HEAD (branch krunbox/NAME) instead of the workspace itself; see 'krunbox diff', 'export --to', 'land'")
	fl.StringVarP(&f.workdir, "workdir", "w", "", "working directory in the guest, absolute, made if missing (default: the workspace, else the image's)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set KEY=VALUE in the guest (KEY alone takes this process's value); nothing else of the host environment is passed")
	fl.StringVarP(&f.user, "user", "u", "", "guest user, name or uid[:gid] (default: the image's)")
	fl.StringArrayVarP(&f.ports, "publish", "p", nil, "publish a guest TCP port on the host: [IP:]HOST:GUEST, on 127.0.0.1 unless IP is given")
	fl.StringArrayVar(&f.labels, "label", nil, "add a label KEY=VALUE to the sandbox")
	fl.StringArrayVar(&f.secrets, "secret", nil, "give the guest NAME set to a placeholder that the host replaces with the value, read at each start from HOST_VAR or PATH, only in HTTP(S) requests to the hosts: "+hostapi.SecretHelp+" (needs --net public or allow=)")
	add := func(key, flag, help string) {
		f.configured = append(f.configured, configFlag{key, flag, fl.String(flag, "", help+" (config "+key+")")})
	}
	add("cpus", "cpus", "number of vCPUs")
	add("memory", "memory", "guest memory, e.g. 2GiB or 512MiB")
	add("disk_size", "disk", "disk of a block root, the most the guest can write to its root, e.g. 16GiB (sparse: the host spends what the guest writes)")
	add("network", "net", "network: public (the internet, no private or host address; the default), allow=RULE,... (host names, *.domain, IPs, CIDRs, each optionally :PORT), open (everything, the host included), tsi (the host's, through libkrun) or none")
	add("pull_policy", "pull", "when to pull the image: missing (if not cached), always or never")
	add("platform", "platform", "image platform, e.g. linux/arm64; default: the host's")
	add("root", "root", "root file system: auto (a block root where the host gives one, else an overlay where it allows it, else a copy of the image), block (the guest's writes on a disk of its own, --disk), overlay or copy")
	fl.BoolVar(&f.gitWritable, "git-writable", false, "let the guest change the hooks and config your git runs in the workspace's .git, read-only by default (config git_writable)")
	if idle {
		add("idle_timeout", "idle-timeout", "stop the VM after this long without exec or file activity, e.g. 30m; 0 never")
	}
}

// config returns the sandbox configuration: the user's configuration with
// the flags given over it, for image (empty: the configured image).
func (f *sandboxFlags) config(cmd *cobra.Command, uc *userconfig.Config, image string) (hostapi.Config, error) {
	for _, c := range f.configured {
		if cmd.Flags().Changed(c.flag) {
			if err := uc.Set(c.key, *c.value, "flag --"+c.flag); err != nil {
				return hostapi.Config{}, &usageError{err: err}
			}
		}
	}
	if cmd.Flags().Changed("git-writable") {
		if err := uc.Set("git_writable", strconv.FormatBool(f.gitWritable), "flag --git-writable"); err != nil {
			return hostapi.Config{}, &usageError{err: err}
		}
	}
	if image == "" {
		image = uc.Image
	}
	cfg := hostapi.Config{
		Name:        f.name,
		Image:       image,
		PullPolicy:  hostapi.PullPolicy(uc.PullPolicy),
		Platform:    uc.Platform,
		CPUs:        uc.CPUs,
		MemoryMiB:   uc.MemoryMiB,
		DiskMiB:     uc.DiskMiB,
		Workspace:   f.workspace,
		Isolate:     f.isolate,
		Workdir:     f.workdir,
		User:        f.user,
		Network:     hostapi.Network(uc.Network),
		IdleTimeout: uc.IdleTimeout,
		Env:         append([]string(nil), uc.Env...),
		Root:        hostapi.RootKind(uc.Root),
		GitWritable: uc.GitWritable,
		Limits:      hostapi.Limits(uc.Limits),
	}
	env, err := parseEnv(f.env)
	if err != nil {
		return hostapi.Config{}, err
	}
	cfg.Env = append(cfg.Env, env...)
	for _, v := range f.mounts {
		m, err := hostapi.ParseMount(v)
		if err != nil {
			return hostapi.Config{}, &usageError{err: err}
		}
		cfg.Mounts = append(cfg.Mounts, m)
	}
	for _, v := range f.ports {
		p, err := hostapi.ParsePortMapping(v)
		if err != nil {
			return hostapi.Config{}, &usageError{err: err}
		}
		cfg.Ports = append(cfg.Ports, p)
	}
	for _, v := range f.secrets {
		sec, err := hostapi.ParseSecret(v)
		if err != nil {
			return hostapi.Config{}, &usageError{err: err}
		}
		cfg.Secrets = append(cfg.Secrets, sec)
	}
	for _, l := range f.labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return hostapi.Config{}, &usageError{err: fmt.Errorf("label %q: want KEY=VALUE", l)}
		}
		if cfg.Labels == nil {
			cfg.Labels = map[string]string{}
		}
		cfg.Labels[k] = v
	}
	return cfg, nil
}

// parseEnv reads -e values: KEY=VALUE, or KEY alone for this process's
// value of KEY (skipped when unset), the one way to pass a host variable.
func parseEnv(vals []string) ([]string, error) {
	var out []string
	for _, v := range vals {
		k, _, ok := strings.Cut(v, "=")
		if k == "" {
			return nil, &usageError{err: fmt.Errorf("env %q: want KEY=VALUE or KEY", v)}
		}
		if !ok {
			hv, set := os.LookupEnv(k)
			if !set {
				continue
			}
			v = k + "=" + hv
		}
		out = append(out, v)
	}
	return out, nil
}
