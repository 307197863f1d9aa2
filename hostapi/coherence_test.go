package hostapi

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/testkrun"
	"github.com/krunbox/krunbox/krun"
)

// libkrunShares is what the test double recorded of each share when the VM
// started (TESTKRUN_DUMP): tag to its cache setting, nil when none was set.
func libkrunShares(t *testing.T, dump string) map[string]*struct {
	EntryMs uint32 `json:"entry_timeout_ms"`
	AttrMs  uint32 `json:"attr_timeout_ms"`
	Policy  uint32 `json:"policy"`
} {
	t.Helper()
	data, err := os.ReadFile(dump)
	if err != nil {
		t.Fatalf("the test double recorded no configuration: %v", err)
	}
	var got struct {
		Shares []struct {
			Tag   string `json:"tag"`
			Cache *struct {
				EntryMs uint32 `json:"entry_timeout_ms"`
				AttrMs  uint32 `json:"attr_timeout_ms"`
				Policy  uint32 `json:"policy"`
			} `json:"cache"`
		} `json:"shares"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	m := map[string]*struct {
		EntryMs uint32 `json:"entry_timeout_ms"`
		AttrMs  uint32 `json:"attr_timeout_ms"`
		Policy  uint32 `json:"policy"`
	}{}
	for _, s := range got.Shares {
		m[s.Tag] = s.Cache
	}
	return m
}

// The workspace and -v mounts are coherent (timeouts 0), a :cached mount
// and the root keep libkrun's caching.
func TestSharesCoherentButCachedAndRoot(t *testing.T) {
	h, ref := testHost(t)
	dump := filepath.Join(t.TempDir(), "krun.json")
	t.Setenv("TESTKRUN_DUMP", dump) // inherited by the runner
	ws, live, deps := t.TempDir(), t.TempDir(), t.TempDir()
	started(t, h, Config{Image: ref, Workspace: ws, Mounts: []Mount{
		{HostPath: live, GuestPath: "/live"},
		{HostPath: deps, GuestPath: "/deps", ReadOnly: true, Cached: true},
	}})
	shares := libkrunShares(t, dump)
	if c, ok := shares[krun.RootTag]; !ok || c != nil {
		t.Errorf("the root: present %v, cache %+v; want libkrun's default caching", ok, c)
	}
	for i, what := range []string{"the workspace", "a -v mount"} {
		c := shares[mountTag(i)]
		if c == nil || c.EntryMs != 0 || c.AttrMs != 0 || c.Policy != uint32(krun.CacheAuto) {
			t.Errorf("%s (%s): cache %+v, want timeouts 0, close-to-open", what, mountTag(i), c)
		}
	}
	if c, ok := shares[mountTag(2)]; !ok || c != nil {
		t.Errorf("the :cached mount: present %v, cache %+v; want libkrun's default caching", ok, c)
	}
}

// With a libkrun that cannot make shares coherent (an upstream one), a
// sandbox with a workspace still starts; its status says the workspace may
// be stale and why, and Start warns once per Host, not for a sandbox that
// shares nothing.
func TestStaleSharesWarnedOnce(t *testing.T) {
	var logs bytes.Buffer
	lw := &lockedWriter{w: &logs}
	h, ref := testHost(t, WithLibkrun(testkrun.Build(t, "-DTESTKRUN_STOCK")),
		WithLogger(slog.New(slog.NewTextHandler(lw, nil))))
	logged := func() string {
		lw.mu.Lock()
		defer lw.mu.Unlock()
		return logs.String()
	}
	started(t, h, Config{Image: ref})
	if strings.Contains(logged(), "stale") {
		t.Errorf("a sandbox without shares warned about stale shares:\n%s", logged())
	}
	var last *Sandbox
	for range 2 {
		last = started(t, h, Config{Image: ref, Workspace: t.TempDir()})
	}
	if n := strings.Count(logged(), "the workspace may be stale in the guest"); n != 1 {
		t.Errorf("%d warnings about stale shares in two starts, want 1:\n%s", n, logged())
	}
	st, err := last.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Libkrun == nil || !strings.Contains(st.Libkrun.StaleShares, "up to 5s stale") || !strings.Contains(st.Libkrun.StaleShares, krun.ShareCacheFunc) {
		t.Errorf("status's libkrun: %+v, want it to say the workspace may be 5s stale, and why", st.Libkrun)
	}
}
