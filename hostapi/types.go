package hostapi

import (
	"time"

	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/oci"
)

// The SDK's own types for what its lower layers (the VM runner, package
// vmm; the image cache, package oci) report: a program using hostapi
// depends on hostapi's API only, and errors.As works on hostapi's types.

// ExitStatus is how a sandbox's VM ended.
type ExitStatus struct {
	// Code is the VM's exit code: the guest agent's, 128+N when it was
	// killed by signal N, 125 to 127 when it could not start; or 128+N
	// when the VM's runner process itself was killed by signal N.
	Code int `json:"code"`
	// Signal names the signal that killed the runner, if one did.
	Signal string `json:"signal,omitempty"`
	// Time is when the runner was seen to end.
	Time time.Time `json:"time"`
}

func (e *ExitStatus) String() string { return (*vmm.ExitStatus)(e).String() }

// LibkrunInfo says which libkrun a running VM loaded, and why that copy.
type LibkrunInfo struct {
	// Library is the libkrun file.
	Library string `json:"library"`
	// Why says why that file: named by the caller or by KRUNBOX_LIBKRUN,
	// installed with the program, in $KRUNBOX_HOME/lib, or the system's.
	Why string `json:"why"`
	// Krunfw is the libkrunfw file loaded from beside libkrun; empty when
	// libkrun loads libkrunfw by name, from the system.
	Krunfw string `json:"krunfw,omitempty"`
	// StaleShares, when not empty, says that this libkrun cannot make the
	// workspace and mounts coherent: the guest may see a host change to
	// them up to 5 s late, and why.
	StaleShares string `json:"stale_shares,omitempty"`
}

// PreflightError reports what this host lacks to run VMs (no KVM, no
// libkrun or libkrunfw, no guest agent): Host.Preflight returns it, and
// Sandbox.Start's error wraps it when a VM could not boot for that reason.
type PreflightError struct {
	// Problems are what is missing, in the order checked.
	Problems []error
	hint     string
}

func (e *PreflightError) Error() string { return (&vmm.PreflightError{Problems: e.Problems}).Error() }

// Unwrap returns the problems, for errors.Is and errors.As.
func (e *PreflightError) Unwrap() []error { return e.Problems }

// Hint says how to fix the first problem and where to look for more.
func (e *PreflightError) Hint() string { return e.hint }

// RunnerError reports a VM whose runner process gave up before it booted
// the VM (no KVM, no libkrun, a configuration libkrun refused...): how the
// runner ended and the end of its log, which says why.
type RunnerError struct {
	// Status is how the runner ended.
	Status *ExitStatus
	// Log is the end of the runner's log.
	Log string
}

func (e *RunnerError) Error() string {
	return (&vmm.StartError{Status: (*vmm.ExitStatus)(e.Status), Log: e.Log}).Error()
}

// sdkError returns err, an error of package vmm, as hostapi's:
// *vmm.PreflightError as *PreflightError, *vmm.StartError as
// *RunnerError; any other error as it is.
func sdkError(err error) error {
	switch e := err.(type) {
	case *vmm.PreflightError:
		return &PreflightError{Problems: e.Problems, hint: e.Hint()}
	case *vmm.StartError:
		return &RunnerError{Status: (*ExitStatus)(e.Status), Log: e.Log}
	}
	return err
}

// ImageConfig is what a sandbox takes from its image's config (the OCI
// image config's fields of the same names), as Create checked it.
type ImageConfig struct {
	User         string            `json:"user,omitempty"`         // the default user
	Env          []string          `json:"env,omitempty"`          // the default environment, KEY=VALUE
	Entrypoint   []string          `json:"entrypoint,omitempty"`   // the command the image runs...
	Cmd          []string          `json:"cmd,omitempty"`          // ...with these default arguments
	WorkingDir   string            `json:"workingDir,omitempty"`   // absolute, or empty
	ExposedPorts []string          `json:"exposedPorts,omitempty"` // "80/tcp"...
	Volumes      []string          `json:"volumes,omitempty"`      // guest paths
	Labels       map[string]string `json:"labels,omitempty"`
	StopSignal   string            `json:"stopSignal,omitempty"`
}

// PullPolicy says when Create pulls a sandbox's image.
type PullPolicy string

// Pull policies.
const (
	// PullIfMissing uses the cached image when there is one (default): a
	// tag is resolved to a digest once, on the first pull.
	PullIfMissing PullPolicy = "if-missing"
	// PullAlways asks the source for the reference's current digest.
	PullAlways PullPolicy = "always"
	// PullNever only uses the cache.
	PullNever PullPolicy = "never"
)

// LayerState is the state of one layer during a pull.
type LayerState int

// Layer states, in the order a layer goes through them.
const (
	LayerDownloading LayerState = iota // downloading; Done says how far
	LayerDownloaded                    // downloaded and verified
	LayerCached                        // already in the blob cache
	LayerExtracting                    // being flattened into the image's tree
	LayerExtracted                     // flattened
)

func (s LayerState) String() string { return oci.ProgressState(s).String() }

// PullProgress reports the progress of one layer of an image pull. Calls
// are serialized.
type PullProgress struct {
	Image string // normalized reference
	Layer string // the layer's compressed digest, "sha256:..."
	Index int    // 0-based position in the image
	Count int    // number of layers
	Size  int64  // compressed size
	Done  int64  // bytes downloaded so far
	State LayerState
	// Local is set when the layer comes from a local source (an OCI
	// layout or a docker archive): downloading it copies it into the cache.
	Local bool
}

// Label names the layer's state for people: as State's String, except
// "copying" and "copied" for a layer from a local source.
func (p PullProgress) Label() string {
	return oci.Progress{State: oci.ProgressState(p.State), Local: p.Local}.Label()
}

func pullProgress(p oci.Progress) PullProgress {
	return PullProgress{Image: p.Image, Layer: p.Layer.String(), Index: p.Index, Count: p.Count, Size: p.Size, Done: p.Done, State: LayerState(p.State), Local: p.Local}
}

// ProtectedPath is a git path protected from a sandbox's guest.
type ProtectedPath struct {
	// Path is absolute, clean and without symlinks.
	Path string `json:"path"`
	// Writable pins Path without making it read-only: a git directory
	// the guest may write but not rename or remove.
	Writable bool `json:"writable,omitempty"`
}
