package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// imageJSON is one image in `krunbox images --json`.
type imageJSON struct {
	Name         string    `json:"name"`
	Repository   string    `json:"repository"`
	Tag          string    `json:"tag"`
	Digest       string    `json:"digest"`
	Platform     string    `json:"platform"`
	Size         int64     `json:"size"`
	UnpackedSize int64     `json:"unpackedSize"`
	Pulled       time.Time `json:"pulled"`
	Rootfs       string    `json:"rootfs"`
}

func newImagesCmd(s *streams) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "images [--json]",
		Short: "List the images in the image cache",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := openImageStore()
			if err != nil {
				return err
			}
			imgs, err := store.List(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				out := make([]imageJSON, 0, len(imgs))
				for _, img := range imgs {
					out = append(out, imageJSON{
						Name: img.Name, Repository: img.Repository(), Tag: img.Tag(), Digest: img.Digest.String(),
						Platform: img.Platform.String(), Size: img.Size, UnpackedSize: img.UnpackedSize,
						Pulled: img.Pulled, Rootfs: img.Rootfs,
					})
				}
				return printJSON(s.out, out)
			}
			tw := tabwriter.NewWriter(s.out, 0, 4, 3, ' ', 0)
			fmt.Fprintln(tw, "REPOSITORY\tTAG\tDIGEST\tPLATFORM\tSIZE\tPULLED")
			for _, img := range imgs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", img.Repository(), img.Tag(), img.Digest.Hex[:12],
					img.Platform.String(), humanSize(img.Size), ago(time.Since(img.Pulled)))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// ago says how long ago something happened, roughly.
func ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return count(int(d.Minutes()), "minute") + " ago"
	case d < 48*time.Hour:
		return count(int(d.Hours()), "hour") + " ago"
	default:
		return count(int(d.Hours()/24), "day") + " ago"
	}
}

// count says "1 thing" or "N things".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
