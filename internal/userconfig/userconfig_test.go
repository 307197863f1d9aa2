package userconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeConfig(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func source(c *Config, key string) string {
	for _, e := range c.Entries() {
		if e.Key == key {
			return e.Source
		}
	}
	return ""
}

func TestLayering(t *testing.T) {
	dir := writeConfig(t, `
image = "127.0.0.1:5000/dev"
cpus = 4
memory = "4GiB"
idle_timeout = "30m"
env = ["A=1", "B=two words"]
git_writable = true
`)
	c, err := Load(dir, env(map[string]string{"KRUNBOX_CPUS": "8", "KRUNBOX_NETWORK": "none", "KRUNBOX_START_TIMEOUT": "5m"}))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName)
	checks := []struct {
		key, source string
		ok          bool
	}{
		{"image", path, c.Image == "127.0.0.1:5000/dev"},
		{"cpus", "env KRUNBOX_CPUS", c.CPUs == 8},
		{"memory", path, c.MemoryMiB == 4096},
		{"network", "env KRUNBOX_NETWORK", c.Network == "none"},
		{"pull_policy", "default", c.PullPolicy == "if-missing"},
		{"idle_timeout", path, c.IdleTimeout == 30*time.Minute},
		{"stop_timeout", "default", c.StopTimeout == 10*time.Second},
		{"start_timeout", "env KRUNBOX_START_TIMEOUT", c.StartTimeout == 5*time.Minute},
		{"env", path, strings.Join(c.Env, "|") == "A=1|B=two words"},
		{"git_writable", path, c.GitWritable},
	}
	for _, ck := range checks {
		if !ck.ok {
			t.Errorf("%s has the wrong value: %+v", ck.key, c)
		}
		if got := source(c, ck.key); got != ck.source {
			t.Errorf("source of %s = %q, want %q", ck.key, got, ck.source)
		}
	}
}

func TestNoFileGivesDefaults(t *testing.T) {
	c, err := Load(t.TempDir(), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	d := Defaults()
	if c.Image != d.Image || c.CPUs != 2 || c.MemoryMiB != 2048 || c.Network != "public" || c.StartTimeout != time.Minute {
		t.Fatalf("Load without a file = %+v, want the defaults", c)
	}
	for _, e := range c.Entries() {
		if e.Source != "default" {
			t.Errorf("%s comes from %q, want default", e.Key, e.Source)
		}
	}
}

func TestErrorsNameTheCulprit(t *testing.T) {
	tests := []struct {
		name, file string
		env        map[string]string
		want       []string
	}{
		{"unknown key", "cpu = 2\n", nil, []string{"unknown key \"cpu\"", "cpus"}},
		{"bad toml", "cpus = = 2\n", nil, []string{FileName + ":1:"}},
		{"cpus range", "cpus = 0\n", nil, []string{"cpus", "1 to 255"}},
		{"cpus type", "cpus = 1.5\n", nil, []string{"cpus", "unsupported value"}},
		{"memory", "memory = \"lots\"\n", nil, []string{"memory", "2GiB"}},
		{"memory too small", "memory = \"1MiB\"\n", nil, []string{"128MiB"}},
		{"network", "", map[string]string{"KRUNBOX_NETWORK": "host"}, []string{"KRUNBOX_NETWORK", "tsi or allow="}},
		{"policy", "pull_policy = \"sometimes\"\n", nil, []string{"if-missing, always, never"}},
		{"duration", "", map[string]string{"KRUNBOX_IDLE_TIMEOUT": "-1s"}, []string{"KRUNBOX_IDLE_TIMEOUT", "duration"}},
		{"start timeout 0", "start_timeout = \"0\"\n", nil, []string{"start_timeout", "above 0"}},
		{"env entry", "env = [\"NOEQUALS\"]\n", nil, []string{"KEY=VALUE"}},
		{"env comma", "env = [\"A=1,2\"]\n", nil, []string{"comma"}},
		{"git_writable", "git_writable = \"maybe\"\n", nil, []string{"git_writable", "true or false"}},
		{"git_writable env", "", map[string]string{"KRUNBOX_GIT_WRITABLE": "sometimes"}, []string{"KRUNBOX_GIT_WRITABLE", "true or false"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(writeConfig(t, tt.file), env(tt.env))
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestParseDiskSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
		err  string
	}{
		{"16GiB", 16 << 10, ""},
		{"512", 512, ""},
		{"1TiB", 1 << 20, ""},
		{"255MiB", 0, "want 256MiB to 16TiB"},
		{"17TiB", 0, "want 256MiB to 16TiB"},
		{"big", 0, "want a size such as 16GiB"},
	} {
		got, err := ParseDiskSize(tt.in)
		if got != tt.want || (tt.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("ParseDiskSize(%q) = %d, %v; want %d, %q", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestParseMemory(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"2GiB", 2048}, {"2g", 2048}, {"512m", 512}, {"512MiB", 512}, {"1.5g", 1536}, {"1024", 1024},
	}
	for _, tt := range tests {
		got, err := ParseMemory(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
		if back, err := ParseMemory(FormatMemory(got)); err != nil || back != got {
			t.Errorf("FormatMemory(%d) = %q does not read back", got, FormatMemory(got))
		}
	}
}

func TestSetOverridesEveryLayer(t *testing.T) {
	dir := writeConfig(t, "cpus = 4\n")
	c, err := Load(dir, env(map[string]string{"KRUNBOX_CPUS": "8"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set("cpus", "3", "flag --cpus"); err != nil {
		t.Fatal(err)
	}
	if c.CPUs != 3 || source(c, "cpus") != "flag --cpus" {
		t.Errorf("after Set: cpus %d from %q", c.CPUs, source(c, "cpus"))
	}
	err = c.Set("cpus", "0", "flag --cpus")
	if err == nil || !strings.Contains(err.Error(), "flag --cpus") || c.CPUs != 3 {
		t.Errorf("bad value: %v, cpus %d; want an error naming the flag and the value kept", err, c.CPUs)
	}
	if err := c.Set("no_such_key", "1", "flag"); err == nil || !strings.Contains(err.Error(), "unknown configuration key") {
		t.Errorf("unknown key: %v", err)
	}
}

// The [limits] table sets hostapi.Limits; the environment overrides it;
// what is not set keeps the built-in default.
func TestLimitsTable(t *testing.T) {
	dir := writeConfig(t, `
cpus = 3
[limits]
tcp_connections = 100
network_buffer = "16MiB"
log_size = "1MiB"
`)
	c, err := Load(dir, env(map[string]string{"KRUNBOX_LIMIT_UDP_FLOWS": "7", "KRUNBOX_LIMIT_LOG_SIZE": "2MiB"}))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName)
	d := Defaults().Limits
	want := Limits{TCPConnections: 100, UDPFlows: 7, DNSConnections: d.DNSConnections, DNSQueries: d.DNSQueries,
		ConnectionBuffer: d.ConnectionBuffer, NetworkBuffer: 16 << 20, LogSize: 2 << 20}
	if c.Limits != want || c.CPUs != 3 {
		t.Errorf("limits = %+v (cpus %d), want %+v (cpus 3)", c.Limits, c.CPUs, want)
	}
	for key, src := range map[string]string{
		"limits.tcp_connections": path, "limits.network_buffer": path,
		"limits.udp_flows": "env KRUNBOX_LIMIT_UDP_FLOWS", "limits.log_size": "env KRUNBOX_LIMIT_LOG_SIZE",
		"limits.dns_queries": "default",
	} {
		if got := source(c, key); got != src {
			t.Errorf("source of %s = %q, want %q", key, got, src)
		}
	}
	if d.TCPConnections <= 0 || d.LogSize <= 0 || d.NetworkBuffer <= 0 {
		t.Errorf("default limits %+v: every one must be set", d)
	}
}

func TestLimitsRejected(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"zero", "[limits]\ntcp_connections = 0\n", "limits.tcp_connections: want a whole number above 0"},
		{"negative", "[limits]\nudp_flows = -1\n", "limits.udp_flows"},
		{"unknown", "[limits]\nthreads = 4\n", `unknown key "limits.threads"`},
		{"not a table", "limits = 4\n", "limits: want a table"},
		{"log too small", "[limits]\nlog_size = \"1KiB\"\n", "limits.log_size: want at least 64KiB"},
		{"bad size", "[limits]\nnetwork_buffer = \"lots\"\n", "want a size such as 4MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeConfig(t, tc.file), env(nil))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
