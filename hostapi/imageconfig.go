package hostapi

import (
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"unicode"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/oci"
)

// checkImageConfig makes what a sandbox takes from its image's config
// (Env, User, WorkingDir) usable by the guest agent, which refuses a
// config holding anything it cannot use. The image is hostile, and a
// sandbox must never come up other than its configuration says: so an Env
// entry that is not KEY=VALUE, or holds a NUL, and a WorkingDir that is
// not an absolute path are dropped, each with a warning naming it; a User
// that cannot name a user (control characters, a NUL) is an error, since
// dropping it would run the image's commands as root.
func checkImageConfig(ref string, oc oci.ImageConfig, log *slog.Logger) (ImageConfig, error) {
	c := ImageConfig(oc)
	if strings.ContainsFunc(c.User, unicode.IsControl) {
		return c, fmt.Errorf("image %s: its user %q holds control characters", ref, c.User)
	}
	c.Env = slices.DeleteFunc(slices.Clone(c.Env), func(e string) bool {
		if err := protocol.CheckEnv(e); err != nil {
			log.Warn("image env entry dropped", "image", ref, "entry", e, "why", err)
			return true
		}
		return false
	})
	if c.WorkingDir != "" && (!path.IsAbs(c.WorkingDir) || strings.ContainsRune(c.WorkingDir, 0)) {
		log.Warn("image working directory dropped: not an absolute path; commands start in / unless a workdir or workspace is set", "image", ref, "workingDir", c.WorkingDir)
		c.WorkingDir = ""
	}
	return c, nil
}
