package hostapi

import (
	"testing"

	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/secrets"
	"github.com/krunbox/krunbox/oci"
)

// TestSDKValuesMatchTheLayersBelow: the SDK's own constants are converted
// to and from those of packages oci and vmm by value.
func TestSDKValuesMatchTheLayersBelow(t *testing.T) {
	for _, c := range []struct{ sdk, below string }{
		{string(PullIfMissing), string(oci.PullIfMissing)},
		{string(PullAlways), string(oci.PullAlways)},
		{string(PullNever), string(oci.PullNever)},
		{string(NetworkTSI), string(vmm.NetworkTSI)},
		{string(NetworkNone), string(vmm.NetworkNone)},
		{string(NetworkPublic), string(vmm.NetworkPublic)},
		{string(NetworkOpen), string(vmm.NetworkOpen)},
		{SecretHelp, secrets.Help},
		{LayerDownloading.String(), oci.LayerFetching.String()},
	} {
		if c.sdk != c.below {
			t.Errorf("hostapi's %q is %q below", c.sdk, c.below)
		}
	}
	for _, c := range []struct {
		sdk   LayerState
		below oci.ProgressState
	}{
		{LayerDownloading, oci.LayerFetching},
		{LayerDownloaded, oci.LayerFetched},
		{LayerCached, oci.LayerCached},
		{LayerExtracting, oci.LayerApplying},
		{LayerExtracted, oci.LayerApplied},
	} {
		if int(c.sdk) != int(c.below) {
			t.Errorf("layer state %s is %d, %s below is %d", c.sdk, c.sdk, c.below, c.below)
		}
	}
}
