package hostapi

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// RunOption configures Run.
type RunOption func(*runOptions)

type runOptions struct {
	host *Host
	cfg  Config
}

// RunOnHost makes Run use h, for its directories, libkrun and timeouts
// (default: NewHost(), on the default directories).
func RunOnHost(h *Host) RunOption { return func(o *runOptions) { o.host = h } }

// RunWithConfig makes Run create the sandbox from cfg: its workspace,
// mounts, environment, resources... Run sets cfg.Image to its image and
// cfg.AutoRemove; a cfg.Name left empty gets a generated name.
func RunWithConfig(cfg Config) RunOption { return func(o *runOptions) { o.cfg = cfg } }

// removeTimeout bounds the removal of Run's sandbox once ctx has ended.
const removeTimeout = 30 * time.Second

// Run runs cmd in a new sandbox made from image and returns how it ended,
// as Client.Run does: the error is for a command that did not run, the
// result for one that did, whatever its exit status. It checks that the
// host can run VMs (Host.Preflight) before pulling anything, creates the
// sandbox, starts it, runs cmd and removes the sandbox, also when a step
// fails or ctx ends (a cancelled ctx kills cmd). A removal that fails is
// an error beside the result. The sandbox is created with
// Config.AutoRemove: if this program dies before removing it, the next
// Host.List or Host.Create removes it once its VM has stopped.
func Run(ctx context.Context, image string, cmd Cmd, opts ...RunOption) (res *RunResult, err error) {
	var o runOptions
	for _, opt := range opts {
		opt(&o)
	}
	h := o.host
	if h == nil {
		if h, err = NewHost(); err != nil {
			return nil, err
		}
	}
	if err := h.Preflight(ctx); err != nil {
		return nil, err
	}
	cfg := o.cfg
	cfg.Image, cfg.AutoRemove = image, true
	sb, err := h.Create(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
		defer cancel()
		if rerr := sb.Remove(rctx); rerr != nil {
			err = errors.Join(err, fmt.Errorf("run: %w", rerr))
		}
	}()
	if err := sb.Start(ctx); err != nil {
		return nil, err
	}
	c := sb.Client()
	defer c.Close()
	return c.Run(ctx, cmd)
}
