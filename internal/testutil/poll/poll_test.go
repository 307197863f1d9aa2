package poll

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestScaled checks Scaled against KRUNBOX_E2E_TIME_SCALE, each value in a
// process of its own since the scale is read once.
func TestScaled(t *testing.T) {
	if want := os.Getenv("POLL_TEST_WANT"); want != "" {
		if got := Scaled(2 * time.Second).String(); got != want {
			t.Fatalf("Scaled(2s) with %s=%q: %s, want %s", ScaleEnv, os.Getenv(ScaleEnv), got, want)
		}
		return
	}
	for _, tc := range []struct{ scale, want string }{
		{"", "2s"},
		{"4", "8s"},
		{"1.5", "3s"},
		{"0.1", "2s"}, // never shorter than the double's
		{"many", "2s"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestScaled$")
		cmd.Env = append(os.Environ(), ScaleEnv+"="+tc.scale, "POLL_TEST_WANT="+tc.want)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s=%q: %v\n%s", ScaleEnv, tc.scale, err, out)
		}
	}
}
