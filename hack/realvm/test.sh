#!/bin/bash
# Runs krunbox's real-libkrun tests in real microVMs: each group of hack/realvm/groups
# boots an L1 of its own with ../shared/realvm/run (QEMU TCG with AMD SVM, a real
# /dev/kvm and libkrun 1.19 in it), runs its tests there (l1-run.sh), and this script
# prints which tests ran on real VMs and how each ended.
#
# usage: hack/realvm/test.sh ci|full|bench [GROUP...]
#   ci    the groups of tier ci (make test-realvm, run by make test)
#   full  the groups of tiers ci and full (make test-realvm-full)
#   bench the benchmarks (make bench-realvm), and their figures
#   GROUP only these groups (of the tier)
# env: BUILD    build directory with krunbox, e2e.test, vmm.test, vsockprobe, netprobe, testimage/
#               (make test-realvm builds them; default: build/)
#      REALVM   the harness (default: ../shared/realvm beside the repository)
#      MEM      L1's memory in MiB (default 6144)
#      SMP      L1's CPUs (default 1)
#      GROUPS_FILE  the groups to run (default: hack/realvm/groups)
#      MAX_VMEXIT0  VMEXIT0 results the ci tier tolerates (default 3; see the end)
#      L1_STALL  seconds without L1's heartbeat before it counts as frozen (default 90)
#      KRUN_LIB  the libkrun and libkrunfw folder L1 gets (default: $REALVM/lib, upstream's
#               1.19; make test-realvm passes make libkrun's, krunbox's own)
#      KRUNFW   a libkrunfw.so.5 L1 gets instead of KRUN_LIB's (make libkrunfw's, whose guest
#               kernel fires file events for host edits; without it FileEvents SKIPs)
#      KRUNBOX_E2E_COHERENT=1  run the coherence scenarios even on a libkrun without
#               krun_set_virtiofs_cache (default: only on one with it; else they SKIP)
# Output of each group goes to $BUILD/realvm/out/GROUP (logs/TEST.log, results,
# progress), copied from L1 as it is written. An L1 that gives back no exit code (a
# hang of the harness, not a test failure) is booted once more; nothing else is retried.
# Exits 0 when every test passed or skipped (the ci tier: but for up to MAX_VMEXIT0
# VMEXIT0 results, see the end).
# The whole script is one block, read before it runs: editing it meanwhile is safe.
{
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=$ROOT/hack/realvm
TIER=${1:?usage: test.sh ci|full|bench [GROUP...]}
shift
case $TIER in ci | full | bench) ;; *) echo "test.sh: tier $TIER: want ci, full or bench" >&2; exit 2 ;; esac
BUILD=${BUILD:-$ROOT/build}
REALVM=${REALVM:-$(cd "$ROOT/.." && pwd)/shared/realvm}
export MEM=${MEM:-6144}
# L1's CPUs: one. With run's default of two, L1 froze (its heartbeat silent, QEMU
# spinning) in 2 of 8 boots of a CI check of 2026-12-02 and 5 of 6 groups the day
# before; with one, in 1 of 16 boots that day, and the ci tier took 866 and 1052 s
# against 1534 s.
export SMP=${SMP:-1}
[ -x "$REALVM/run" ] || { echo "test.sh: $REALVM/run is missing (set REALVM)" >&2; exit 2; }
W=$BUILD/realvm
mkdir -p "$W"

# The libkrun and libkrunfw L1 gets (run's KRUN_LIB, default $REALVM/lib). A copy of that
# folder may hold libkrun.so.1 as a small text file naming the versioned file (a symlink
# that lost its kind): such a name is followed here, into $W/lib.
src=${KRUN_LIB:-$REALVM/lib}
LIBSRC=$src # as it is, for the dist kind: hack/dist/dist.sh follows such names itself
rm -rf "$W/lib"
mkdir -p "$W/lib"
for l in libkrun.so.1 libkrunfw.so.5; do
	f=$src/$l
	if [ -f "$f" ] && [ "$(stat -Lc %s "$f")" -lt 256 ] && [ "$(head -c 4 "$f")" != $'\x7fELF' ]; then
		f=$src/$(basename "$(cat "$f")")
	fi
	cp -L "$f" "$W/lib/$l" || { echo "test.sh: no $l in $src (set KRUN_LIB)" >&2; exit 2; }
done
if [ -n "${KRUNFW:-}" ]; then
	cp -L "$KRUNFW" "$W/lib/libkrunfw.so.5" || { echo "test.sh: KRUNFW $KRUNFW: cannot copy it" >&2; exit 2; }
	echo "test.sh: libkrunfw from $KRUNFW" >&2
fi
export KRUN_LIB=$W/lib
# The e2e scenarios that need coherent shares (HostChangesSeen, NoLostEdit, Workspace)
# skip, saying why, with a libkrun that cannot make them coherent (an upstream one, as
# $REALVM/lib is): they run, and must pass, with krunbox's own (make libkrun, which
# make test-realvm passes as KRUN_LIB), or with KRUNBOX_E2E_COHERENT=1 (to see them fail
# on a stock library).
COHERENT=${KRUNBOX_E2E_COHERENT:-}
if [ -z "$COHERENT" ] && grep -qa krun_set_virtiofs_cache "$W/lib/libkrun.so.1"; then COHERENT=1; fi
echo "test.sh: libkrun from $src$([ "$COHERENT" = 1 ] && echo ", coherent shares required" || echo ": no krun_set_virtiofs_cache, the coherence scenarios will SKIP")" >&2

# pitests DIR: the pi extension's tests and what they run (pi 0.73 and 1.x, tsx, the Node
# 22 both versions run on; not the type checkers) into DIR/pi.
pitests() {
	mkdir -p "$1/pi/node_modules"
	cp -R pi/package.json pi/index.ts pi/src pi/test pi/bench "$1/pi/"
	(cd pi/node_modules && find . -mindepth 1 -maxdepth 1 ! -name typescript ! -name @typescript \
		! -name .bin -exec cp -al {} "$1/pi/node_modules/" \;)
}

# payload GROUP KIND TESTS DEADLINE: the payload directory of one group, only what its
# kind needs (L1's initramfs holds all of it in memory).
payload() {
	local d=$W/payload-$1
	rm -rf "$d"
	mkdir -p "$d"
	cp "$HERE/l1-run.sh" "$d/run.sh"
	printf 'GROUP=%q\nKIND=%q\nTESTS=%q\nDEADLINE=%q\nCOHERENT=%q\n' "$1" "$2" "$3" "$4" "$COHERENT" >"$d/group.conf"
	case $2 in
	e2e) cp "$BUILD/e2e.test" "$BUILD/krunbox" "$BUILD/netprobe" "$d/" && cp -R "$BUILD/testimage" "$d/busybox" ;;
	vmm) cp "$BUILD/vmm.test" "$BUILD/vsockprobe" "$d/" ;;
	pi | bench)
		cp "$BUILD/krunbox" "$d/" && cp -R "$BUILD/testimage" "$d/busybox"
		if [ "$2" = bench ]; then
			cp "$BUILD/hostapi.test" "$BUILD/benchpi" "$BUILD/e2e.test" "$BUILD/netprobe" "$d/"
			cp "$BUILD/krunbox-agent-linux-amd64" "$d/krunbox-agent"
		fi
		# only pi:N needs pi's tests (the other benchmarks run without pi/node_modules)
		[ -d pi/node_modules ] && pitests "$d"
		;;
	dist)
		# The release bundle and the pi package, both carrying the libkrun and libkrunfw
		# of $LIBSRC (as a user gets them; L1 has none of its own: KRUN_LIB=none).
		cp -R "$BUILD/testimage" "$d/busybox"
		KRUNBOX=$BUILD/krunbox VERSION=realvm OUT=$d LIBKRUN_DIR=$LIBSRC hack/dist/dist.sh bundle >&2
		# run copies the shared libraries of the payload's executables into L1 (libc,
		# libzstd): these copies are there for that only, the test unpacks the tarball
		mkdir -p "$d/ldd-only"
		tar -xzf "$d/krunbox-realvm-linux-amd64.tar.gz" -C "$d/ldd-only" --strip-components=1
		rm -rf "$d/ldd-only/share"
		if [ -d pi/node_modules ]; then
			make --no-print-directory pi-tarball BUILD="$BUILD" LIBKRUN_DIR="$LIBSRC" >&2
			# npm install of the tarball, as a user does (L1 has no network: done here)
			mkdir -p "$d/piuser"
			(cd "$d/piuser" && npm install --no-audit --no-fund --no-save "$BUILD"/pi-krunbox-*.tgz >&2)
			pitests "$d"
		fi
		;;
	esac
	echo "$d"
}

# rungroup GROUP TMO PAYLOAD KRUN_LIB EXTRA_BINS: boots L1 on the payload (with libkrun
# from KRUN_LIB, default $KRUN_LIB; "none": no libkrun in L1), booting it again after a
# hang, up to $HANG_BOOTS boots in all (L1's kernel panics in ~1 boot of 5 here);
# prints the payload's exit code, "hang" when none came back, "setup" when L1 could not
# be set up. A hang is told by l1-run.sh's exit-code file, not by run's exit code (run may
# exit 1, not 124, when it stops a hung QEMU).
rungroup() {
	local out=$W/out/$1 rc attempt
	rm -rf "$out.hung"
	for attempt in $(seq "$HANG_BOOTS"); do
		rm -rf "$out"
		mkdir -p "$out"
		echo "=== realvm: group $1, attempt $attempt, L1 timeout ${2}s, output in $out" >&2
		rc=0
		KRUN_LIB=${4:-$KRUN_LIB} TMO=$2 EXTRA_BINS=$5 setsid "$REALVM/run" "$3" "$out" >"$W/console-$1.log" 2>&1 </dev/null &
		watch_l1 $! "$out" || rc=$?
		grep -E '^=== ' "$W/console-$1.log" >&2 || true
		if [ -s "$out/exit-code" ]; then
			rc=$(cat "$out/exit-code")
		elif [ "$rc" = 3 ]; then
			rc=setup
		else
			rc=hang
		fi
		[ "$rc" = hang ] || break
		if [ "$TIER" = ci ] && [ $(($(date +%s) - t_all)) -ge "$REALVM_BUDGET" ]; then
			echo "=== realvm: group $1: L1 hung, and the ci tier's ${REALVM_BUDGET}s are spent: not booting it again" >&2
			break
		fi
		if [ "$attempt" -lt "$HANG_BOOTS" ]; then
			echo "=== realvm: group $1: L1 hung (no exit code came back) after: $(tail -1 "$out/progress" 2>/dev/null); booting it again" >&2
			rm -rf "$out.hung"
			mv "$out" "$out.hung"
			mv "$W/console-$1.log" "$out.hung/console.log"
		fi
	done
	echo "$rc"
}

# watch_l1 PID OUT: waits for run (PID, the leader of its own process group) and returns
# its exit code; stops it when L1 froze: l1-run.sh's sampler writes OUT/logs/top.log
# every 5 s, and when that file has not changed for $L1_STALL seconds L1 no longer runs
# (QEMU spinning with nothing more on its console, 2026-12-01), so its group's timeout
# need not be waited for. The group then has no exit code: a hang, booted again. In the
# ci tier it also stops L1 once the tier has run for REALVM_LIMIT seconds.
watch_l1() {
	local pid=$1 hb=$2/logs/top.log age
	while kill -0 "$pid" 2>/dev/null; do
		if [ -f "$hb" ] && [ ! -s "$2/exit-code" ]; then
			age=$(($(date +%s) - $(stat -c %Y "$hb")))
			if [ "$age" -ge "$L1_STALL" ]; then
				echo "=== realvm: L1 froze: its heartbeat ($hb) is ${age}s old; stopping it" >&2
				stop_l1 "$pid"
				break
			fi
		fi
		if [ "$TIER" = ci ] && [ $(($(date +%s) - t_all)) -ge "$REALVM_LIMIT" ]; then
			echo "=== realvm: the ci tier's ${REALVM_LIMIT}s are spent; stopping L1" >&2
			stop_l1 "$pid"
			break
		fi
		sleep 5
	done
	wait "$pid"
}

# stop_l1 PID: stops run (PID, the leader of its own process group) and its QEMU.
stop_l1() {
	kill -TERM -- "-$1" 2>/dev/null
	sleep 2
	kill -KILL -- "-$1" 2>/dev/null
}

# How long L1's heartbeat may be silent before L1 counts as frozen (see watch_l1).
L1_STALL=${L1_STALL:-90}

# How many times a group's L1 is booted when no exit code comes back (a hang of the
# harness, or L1's kernel panicking): never for a test that failed.
HANG_BOOTS=${HANG_BOOTS:-3}

# The ci tier gates every CI run, and nested virtualization itself fails now and then:
# L1's kernel panics or soft-locks (hack/realvm/README.md), taking the group's tests with
# it. In the ci tier a group whose every boot wedged is reported as INFRA, loudly, with
# the tests it could not run, and does not fail the tier; a test that ran and failed
# always does. The ci tier also stops starting or booting again groups once it has run
# for REALVM_BUDGET seconds (default 30 minutes), listing the groups not run, and stops
# the L1 still running at REALVM_LIMIT seconds (35 minutes; its group is then a hang), so
# that CI's whole make test stays under 60 minutes however often L1 freezes (five
# freezes in six groups in a check of 2026-12-02: 28 minutes). The full and bench tiers
# count both as failures, and have no such limit.
# (25 and 30 minutes until the group e2e-live, about 6 minutes, joined the tier, 2026-12-03)
REALVM_BUDGET=${REALVM_BUDGET:-1800}
REALVM_LIMIT=${REALVM_LIMIT:-2100}

declare -a summary
failed=0 passed=0 skipped=0 vmexit0=0 infra=0 retried=0
t_all=$(date +%s)
# the list is read whole first: editing it during a run changes nothing of the run
mapfile -t lines <"${GROUPS_FILE:-$HERE/groups}"
for line in "${lines[@]}"; do
	read -r group kind tier tmo deadline tests <<<"$line"
	case $group in '' | '#'*) continue ;; esac
	case $TIER/$tier in ci/ci | full/ci | full/full | bench/bench) ;; *) continue ;; esac
	if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$group"; then continue; fi
	if [ "$TIER" = ci ] && [ $(($(date +%s) - t_all)) -ge "$REALVM_BUDGET" ]; then
		summary+=("INFRA group $group: not run, the ci tier's ${REALVM_BUDGET}s are spent: $tests")
		infra=$((infra + 1))
		continue
	fi
	if { [ "$kind" = pi ] || { [ "$kind" = bench ] && [[ " $tests" == *" pi:"* ]]; }; } && [ ! -d pi/node_modules ]; then
		summary+=("SKIP  group $group: pi/node_modules is missing (npm ci in pi/)")
		skipped=$((skipped + 1))
		continue
	fi
	d=$(payload "$group" "$kind" "$tests" "$deadline")
	t0=$(date +%s)
	klib=$KRUN_LIB
	[ "$kind" = dist ] && klib=none # a machine with nothing installed: the bundle brings libkrun
	# git for the e2e scenario GitWorktree and BenchmarkRealVMShares, mke2fs for block
	# roots' disks (L1 has neither)
	extra=
	if [ "$kind" = e2e ] || [ "$kind" = bench ]; then
		extra="$(command -v git || true) $(PATH=$PATH:/usr/sbin:/sbin command -v mke2fs || true)"
	fi
	rc=$(rungroup "$group" "$tmo" "$d" "$klib" "$extra")
	secs=$(($(date +%s) - t0))
	out=$W/out/$group
	line="group $group ($kind, $tier): payload exit code $rc, ${secs}s"
	if [ -d "$out.hung" ]; then
		line="$line; L1 hung on an earlier boot (the last hung one: $out.hung) and was booted again"
	fi
	summary+=("$line")
	while read -r st name s; do
		summary+=("$(printf '  %-7s %s/%s (%ss)' "$st" "$kind" "$name" "$s")")
		case $st in
		PASS) passed=$((passed + 1)) ;;
		SKIP) skipped=$((skipped + 1)) ;;
		VMEXIT0) vmexit0=$((vmexit0 + 1)) ;;
		RETRIED) retried=$((retried + 1)) ;;
		*) failed=$((failed + 1)) ;;
		esac
	done < <(sed "s/^\(\S*\) pi\//\1 /" "$out/results" 2>/dev/null || true)
	case $rc in
	0 | 1) ;;
	hang)
		summary+=("  HANG    L1 gave no exit code in any boot (at most $HANG_BOOTS, within the tier's budget); last test started: $(tail -1 "$out/progress" 2>/dev/null || echo none); not run: $tests")
		if [ "$TIER" = ci ]; then
			infra=$((infra + 1))
		else
			failed=$((failed + 1))
		fi
		;;
	*)
		failed=$((failed + 1))
		summary+=("  ERROR   L1 could not be set up (exit code $rc); console: $W/console-$group.log")
		;;
	esac
	# the output of what did not pass, for CI's log
	if [ -f "$out/results" ]; then
		while read -r st name _; do
			case $st in PASS | SKIP) continue ;; esac
			log=$out/logs/$(echo "${name#pi/}" | tr / _).log
			[ "$st" = RETRIED ] && log=$log.first # its first run's
			[ "$kind" = pi ] && log="$out/logs/pi.log $out/logs/pi.retry.log"
			[ "$kind" = bench ] && log=$out/logs/${name%%:*}.log
			for f in $log; do
				[ -f "$f" ] && { echo "--- $st $kind/$name: tail of $f" >&2; tail -40 "$f" >&2; }
			done
		done <"$out/results"
	fi
done

if [ "$TIER" = bench ]; then
	echo
	echo "=== realvm benchmarks (ratios inside one L1; absolute times there mean nothing)"
	cat "$W"/out/bench*/logs/RealVM*.log "$W"/out/bench/logs/net.log 2>/dev/null | grep -E '^Benchmark' || true
	cat "$W/out/bench/logs/pi.log" 2>/dev/null || true
fi
echo
echo "=== realvm summary ($TIER tier: tests run on real libkrun microVMs in nested L1 VMs, $(($(date +%s) - t_all))s)"
printf '%s\n' "${summary[@]}"
echo "=== realvm: $passed passed, $failed failed or hung, $skipped skipped, $retried passed on a second run after a fault of the nested emulation (RETRIED), $vmexit0 failed by a VM start ending \"stopped (exit code 0)\" (VMEXIT0), $infra group(s) not run or wedged (INFRA)"
# VMEXIT0: a test that failed because a VM start ended "stopped (exit code 0)", empty
# console, before its agent answered: a known failure of starts in nested VMs whose cause
# is not found yet (hack/realvm/README.md). The ci tier, which gates every CI run, lets
# up to MAX_VMEXIT0 of them pass, loudly; more means starts are broken, not unlucky.
# The full and bench tiers count each as a failure.
if [ "$vmexit0" != 0 ]; then
	if [ "$TIER" = ci ] && [ "$vmexit0" -le "${MAX_VMEXIT0:-3}" ]; then
		echo "=== realvm: WARNING: $vmexit0 test(s) failed only by the known nested-VM start failure (VMEXIT0, at most ${MAX_VMEXIT0:-3} tolerated in the ci tier)"
	else
		failed=$((failed + vmexit0))
	fi
fi
# RETRIED: a test that failed by a fault of the nested emulation and passed when run
# again (l1-run.sh's nested_fault): nested VMs stall now and then, a VM start or a command
# in it never finishing (pi's bash tool, GitReadOnly's exec, 2026-12-01), a guest CPU not
# running for a minute (an RCU stall in its console), a start ending VMEXIT0. The ci tier
# counts it as passed, loudly; the full and bench tiers as failed.
if [ "$retried" != 0 ]; then
	if [ "$TIER" = ci ]; then
		passed=$((passed + retried))
		echo "=== realvm: WARNING: $retried test(s) failed once by a fault of the nested emulation and passed when run again (RETRIED above; the first run's log is printed above)"
	else
		failed=$((failed + retried))
	fi
fi
if [ "$infra" != 0 ]; then
	echo "=== realvm: WARNING: $infra group(s) not run or wedged by the nested virtualization (INFRA above): their tests did not run on real VMs this time"
fi
[ "$failed" = 0 ]
exit
}
