package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/internal/userconfig"
)

// configJSON is what `krunbox config --json` prints.
type configJSON struct {
	// File is the configuration file, and Exists whether it exists.
	File     string             `json:"file"`
	Exists   bool               `json:"exists"`
	Settings []userconfig.Entry `json:"settings"`
}

func newConfigCmd(s *streams) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "config [--json]",
		Short: "Print the effective configuration and where each value comes from",
		Long: `config prints every setting krunbox uses for new sandboxes, its value and its
source. Each layer overrides the one before: the built-in default, the
configuration file (TOML, config.toml in the configuration directory:
$XDG_CONFIG_HOME/krunbox, ~/.config/krunbox, or $KRUNBOX_HOME/config), the
KRUNBOX_* environment variables, and the flags of the command (create,
run, stop).

  # ~/.config/krunbox/config.toml
  image = "alpine:3.20"
  cpus = 4
  memory = "4GiB"
  network = "none"
  env = ["EDITOR=vi"]`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			uc, dir, err := loadConfig()
			if err != nil {
				return err
			}
			file := filepath.Join(dir, userconfig.FileName)
			_, statErr := os.Stat(file)
			exists := statErr == nil
			if statErr != nil && !errors.Is(statErr, fs.ErrNotExist) {
				return statErr
			}
			if asJSON {
				return printJSON(s.out, configJSON{File: file, Exists: exists, Settings: uc.Entries()})
			}
			state := "not found"
			if exists {
				state = "read"
			}
			fmt.Fprintf(s.out, "# configuration file: %s (%s)\n", file, state)
			tw := tabwriter.NewWriter(s.out, 0, 4, 3, ' ', 0)
			fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE\tENV\tMEANING")
			for _, e := range uc.Entries() {
				v := e.Value
				if v == "" {
					v = `""`
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Key, v, e.Source, e.Env, e.Help)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
