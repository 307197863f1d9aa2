package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/oci"
)

// imageFlags are the flags of the commands that may pull an image.
type imageFlags struct {
	platform   string
	policy     string
	maxBytes   int64
	maxEntries int64
}

func (f *imageFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.platform, "platform", "", "platform to pick from multi-platform images, e.g. linux/arm64 (default: the host's)")
	cmd.Flags().StringVar(&f.policy, "pull", "missing", "when to pull the image: missing (if not cached), always or never")
	// The name it had before docker's: kept working, not shown.
	cmd.Flags().StringVar(&f.policy, "policy", "missing", "")
	cmd.Flags().MarkHidden("policy")
	cmd.Flags().Int64Var(&f.maxBytes, "max-size", 0, "refuse images larger than this many bytes uncompressed (default 64 GiB)")
	cmd.Flags().Int64Var(&f.maxEntries, "max-files", 0, "refuse images with more than this many files (default 4194304)")
}

// open opens the image store and returns the pull options the flags ask for.
func (f *imageFlags) open(s *streams) (*oci.Store, []oci.PullOption, error) {
	policy, err := oci.ParsePullPolicy(f.policy)
	if err != nil {
		return nil, nil, &usageError{err: err}
	}
	for _, l := range []struct {
		flag string
		v    int64
	}{{"--max-size", f.maxBytes}, {"--max-files", f.maxEntries}} {
		if l.v < 0 {
			return nil, nil, &usageError{err: fmt.Errorf("%s %d: want a positive limit, or 0 for the default", l.flag, l.v)}
		}
	}
	opts := []oci.PullOption{oci.WithPolicy(policy), withProgress(newProgressPrinter(s.errOut))}
	if f.platform != "" {
		p, err := v1.ParsePlatform(f.platform)
		if err != nil || p.OS == "" || p.Architecture == "" {
			return nil, nil, &usageError{err: fmt.Errorf("platform %q: want OS/ARCH[/VARIANT], e.g. linux/arm64", f.platform)}
		}
		opts = append(opts, oci.WithPlatform(*p))
	}
	store, err := openImageStore(oci.WithLimits(oci.Limits{MaxBytes: f.maxBytes, MaxEntries: f.maxEntries}))
	return store, opts, err
}

// openImageStore opens the image cache of this user (or of KRUNBOX_HOME).
func openImageStore(opts ...oci.Option) (*oci.Store, error) {
	dirs, err := hostapi.DefaultDirs()
	if err != nil {
		return nil, err
	}
	return oci.Open(dirs.Cache, opts...)
}

func newPullCmd(s *streams) *cobra.Command {
	var f imageFlags
	cmd := &cobra.Command{
		Use:   "pull [--platform P] [--pull always|missing|never] REF",
		Short: "Pull an image and flatten it into the image cache",
		Long: "Pull an image and flatten it into a root file system in the image cache.\n" +
			"A tag is resolved to a digest once: later pulls use the cache unless --pull always.\n\n" + oci.ReferenceHelp,
		Args: exactArgs(1, "an image reference"),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, opts, err := f.open(s)
			if err != nil {
				return err
			}
			img, err := store.Pull(cmd.Context(), args[0], opts...)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(s.out, "%s (%s)\nDigest: %s\n", img.Name, img.Platform.String(), img.Digest)
			return err
		},
	}
	f.register(cmd)
	return cmd
}

// progressPrinter shows pull progress: a bar per layer on a terminal,
// one line per layer event otherwise.
type progressPrinter struct {
	w     io.Writer
	tty   bool
	lines []string // terminal: the current line of each layer
}

func newProgressPrinter(w io.Writer) *progressPrinter {
	f, ok := w.(*os.File)
	return &progressPrinter{w: w, tty: ok && term.IsTerminal(int(f.Fd()))}
}

func (p *progressPrinter) print(e oci.Progress) {
	short := e.Layer.Hex[:12]
	if !p.tty {
		if e.State == oci.LayerFetching && e.Done > 0 {
			return // plain output: no intermediate figures
		}
		fmt.Fprintf(p.w, "layer %d/%d %s: %s (%s)\n", e.Index+1, e.Count, short, e.Label(), humanSize(e.Size))
		return
	}
	if len(p.lines) < e.Count {
		fmt.Fprint(p.w, strings.Repeat("\n", e.Count-len(p.lines)))
		p.lines = append(p.lines, make([]string, e.Count-len(p.lines))...)
	}
	line := fmt.Sprintf("%s: %-11s", short, e.Label())
	if e.State == oci.LayerFetching && e.Size > 0 {
		const width = 30
		n := int(e.Done * width / e.Size)
		line += fmt.Sprintf(" [%s%s] %s / %s", strings.Repeat("=", n), strings.Repeat(" ", width-n), humanSize(e.Done), humanSize(e.Size))
	} else {
		line += " " + humanSize(e.Size)
	}
	p.lines[e.Index] = line
	// Redraw every layer's line in place.
	fmt.Fprintf(p.w, "\x1b[%dA", len(p.lines))
	for _, l := range p.lines {
		fmt.Fprintf(p.w, "\r\x1b[2K%s\n", l)
	}
}

// humanSize formats a byte count with a decimal unit, as docker does.
func humanSize(n int64) string {
	units := []string{"B", "kB", "MB", "GB", "TB"}
	f := float64(n)
	i := 0
	for f >= 1000 && i < len(units)-1 {
		f /= 1000
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

// withProgress reports a pull's progress on p.
func withProgress(p *progressPrinter) oci.PullOption { return oci.WithProgress(p.print) }
