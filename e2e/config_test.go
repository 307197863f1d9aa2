package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testConfigLayers(t *testing.T, e *env) {
	e.pull()
	cfgDir := filepath.Join(e.home, "config")
	os.MkdirAll(cfgDir, 0o700)
	file := filepath.Join(cfgDir, "config.toml")
	toml := "image = \"" + image + "\"\ncpus = 3\nmemory = \"1GiB\"\nnetwork = \"none\"\nenv = [\"FROM_FILE=1\"]\n"
	if err := os.WriteFile(file, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	e.extra = []string{"KRUNBOX_MEMORY=768MiB"}

	var cfg struct {
		File     string
		Exists   bool
		Settings []struct{ Key, Value, Source string }
	}
	if err := json.Unmarshal([]byte(e.ok("config", "--json")), &cfg); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range cfg.Settings {
		got[s.Key] = s.Value + " from " + s.Source
	}
	// The suite's vCPU count (KRUNBOX_E2E_CPUS, which nested VMs need) reaches
	// krunbox as KRUNBOX_CPUS: there cpus shows the environment overriding
	// the file, as memory does everywhere.
	wantCPUs := "3 from " + file
	if n := os.Getenv(cpusEnv); n != "" {
		wantCPUs = n + " from env KRUNBOX_CPUS"
	}
	for key, want := range map[string]string{
		"cpus":        wantCPUs,
		"memory":      "768MiB from env KRUNBOX_MEMORY",
		"network":     "none from " + file,
		"pull_policy": "if-missing from default",
	} {
		if got[key] != want {
			t.Errorf("config %s: %q, want %q", key, got[key], want)
		}
	}
	if cfg.File != file || !cfg.Exists {
		t.Errorf("config file %q (exists %v), want %q", cfg.File, cfg.Exists, file)
	}
	if out := e.ok("config"); !strings.Contains(out, file) || !strings.Contains(out, "env KRUNBOX_MEMORY") {
		t.Errorf("config:\n%s", out)
	}

	// A flag overrides all three; no IMAGE takes the configured one.
	e.ok("create", "--name", "layered", "--cpus", "4", "--net", "tsi", "-e", "FROM_FLAG=1")
	c := e.inspect("layered")["config"].(map[string]any)
	if c["cpus"] != 4.0 || c["memory_mib"] != 768.0 || c["network"] != "tsi" || c["image"] != image {
		t.Errorf("sandbox config from file, env and flags: %v", c)
	}
	if env := c["env"].([]any); len(env) != 2 || env[0] != "FROM_FILE=1" || env[1] != "FROM_FLAG=1" {
		t.Errorf("env from the file then the flags: %v", env)
	}
	e.ok("start", "layered")
	if got := e.ok("exec", "layered", "sh", "-c", "echo $FROM_FILE$FROM_FLAG"); got != "11\n" {
		t.Errorf("configured env in the guest: %q", got)
	}

	// A start that does not reach the guest agent within start_timeout
	// stops the VM and fails, saying so; the next start is not hindered.
	e.ok("stop", "layered")
	e.extra = append(e.extra, "KRUNBOX_START_TIMEOUT=1ms")
	checkKrunboxError(t, e.krunbox("start", "layered"), "within 1ms")
	if st := e.ls()["layered"].State; st == "running" || st == "starting" {
		t.Errorf("state after a start that timed out: %q, want its VM stopped", st)
	}
	e.extra = e.extra[:len(e.extra)-1]
	e.ok("start", "layered")

	// A broken file says where.
	os.WriteFile(file, []byte("cpus = \"many\"\n"), 0o600)
	r := e.krunbox("create", "--name", "broken", image)
	checkKrunboxError(t, r, file)
	if !strings.Contains(r.stderr, "cpus") {
		t.Errorf("broken config: %s", r)
	}
	os.WriteFile(file, []byte("cpu = 2\n"), 0o600)
	checkKrunboxError(t, e.krunbox("config"), "unknown key \"cpu\"")
}

func testImagesInUseAreKept(t *testing.T, e *env) {
	e.pull()
	e.ok("create", "--name", "user", image)
	// Removing the image record keeps the tree the sandbox runs on.
	if out := e.ok("rmi", image); !strings.Contains(out, "Removed") {
		t.Errorf("rmi: %q", out)
	}
	if out := e.ok("prune"); !strings.Contains(out, "Nothing to free") {
		t.Errorf("prune freed what a sandbox uses: %q", out)
	}
	e.ok("start", "user")
	if got := e.ok("exec", "user", "echo", "runs"); got != "runs\n" {
		t.Errorf("exec after rmi and prune: %q", got)
	}
	if imgs := e.ok("images", "--json"); strings.TrimSpace(imgs) != "[]" {
		t.Errorf("the image was pulled again instead of its tree being kept: %s", imgs)
	}
	e.ok("rm", "-f", "user")
	if out := e.ok("prune"); !strings.Contains(out, "Freed") {
		t.Errorf("prune after the sandbox went: %q", out)
	}
}
