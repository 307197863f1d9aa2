package protocol

import (
	"strings"
	"testing"
)

func TestConfigRootDisk(t *testing.T) {
	for _, tt := range []struct {
		name string
		disk *RootDisk
		want string // "" for valid
	}{
		{"none", nil, ""},
		{"ext4", &RootDisk{ID: "root", FSType: RootDiskFSType}, ""},
		{"no id", &RootDisk{FSType: RootDiskFSType}, "root disk"},
		{"id with a slash", &RootDisk{ID: "../root", FSType: RootDiskFSType}, "without '/'"},
		{"other file system", &RootDisk{ID: "root", FSType: "xfs"}, "file system ext4"},
	} {
		err := (&Config{RootDisk: tt.disk}).Validate()
		if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}
