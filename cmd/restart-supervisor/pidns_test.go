package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests run the supervisor as PID 1 of a new PID namespace, where
// the kernel's rules differ: orphans of the whole namespace come to it, a
// signal without a handler is dropped instead of acting, and its exit
// kills every process left in the namespace.

func requirePIDNamespace(t *testing.T) {
	t.Helper()
	out, err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "true").CombinedOutput()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("unshare --pid --fork --mount-proc is needed (run as root): %v: %s", err, out)
	}
	t.Skipf("no PID namespaces here (need root and util-linux unshare): %v: %s", err, out)
}

// startPID1 runs the supervisor as PID 1 of a new PID namespace and
// redirects the sup's signals to it (unshare itself does not forward).
func startPID1(t *testing.T, env []string, args ...string) *sup {
	t.Helper()
	requirePIDNamespace(t)
	s := start(t, env, append([]string{"unshare", "--pid", "--fork", "--mount-proc", bin}, args...)...)
	var pid int
	waitFor(t, "the namespace's PID 1", 10*time.Second, func() bool {
		select {
		case <-s.done:
			// A short run may have ended before the poll saw it: there is
			// nothing left to signal, and the test reads its status.
			return true
		default:
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/task/" + strconv.Itoa(s.cmd.Process.Pid) + "/children")
		if err != nil {
			return false
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return false
		}
		pid, _ = strconv.Atoi(f[0])
		exe, _ := os.Readlink("/proc/" + f[0] + "/exe")
		return exe == bin
	})
	s.target = pid
	return s
}

func TestPID1RestartsInPlace(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "cfg.yaml", restart42, 0o644)
	w := writeFile(t, dir, "w.sh", `#!/bin/sh
echo $PPID >> `+dir+`/ppid
n=$(cat `+dir+`/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > `+dir+`/count
[ $n -lt 3 ] && exit 42
exit 0
`, 0o755)
	s := startPID1(t, nil, "--config", cfg, "--", w)
	if st := s.wait(20 * time.Second); st != 0 {
		t.Fatalf("exit status = %d, want 0", st)
	}
	if n := runs(t, dir); n != 3 {
		t.Fatalf("workload ran %d times, want 3", n)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "ppid"))
	if got := strings.Fields(string(b)); len(got) != 3 || got[0] != "1" || got[2] != "1" {
		t.Fatalf("workload's parent pids %q, want the supervisor as PID 1 each time", got)
	}
	if !strings.Contains(s.stderr.String(), "status=0 restarts=2") {
		t.Errorf("final log line lacks status=0 restarts=2")
	}
}

func TestPID1ForwardsSignalsAndStopsOnSIGTERMFromOutside(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"restartPolicy":"Always","podRestartPolicy":"Never",
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"NotIn","values":[]}}]}`
	s := startPID1(t, []string{"RESTART_SUPERVISOR_CONFIG=" + cfg}, "--", trapScript(t, dir))
	testForwarding(t, s, dir)
}

func TestPID1SIGTERMWithDefaultHandlerWorkload(t *testing.T) {
	// sleep has no handler: it dies of the forwarded SIGTERM, and PID 1
	// reports 143 (a Go PID 1 without a handler would exit 2 instead).
	s := startPID1(t, nil, "--", "sleep", "60")
	s.waitLog("workload started", 10*time.Second)
	s.signal(syscall.SIGTERM)
	if st := s.wait(10 * time.Second); st != 143 {
		t.Fatalf("exit status = %d, want 143", st)
	}
}

func TestPID1ReapsThousandOrphans(t *testing.T) {
	dir := t.TempDir()
	s := startPID1(t, nil, "--", orphanScript(t, dir, 1000))
	checkNoZombies(t, dir, s.target)
	s.signal(syscall.SIGTERM)
	if st := s.wait(10 * time.Second); st != 143 {
		t.Fatalf("exit status = %d, want 143", st)
	}
}

func TestPID1StopDuringBackoffAndGrace(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"1h","max":"1h"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`
	s := startPID1(t, []string{"RESTART_SUPERVISOR_CONFIG=" + cfg}, "--", counterScript(t, dir, 42))
	s.waitLog("delay=1h0m0s", 10*time.Second)
	s.signal(syscall.SIGTERM)
	if st := s.wait(10 * time.Second); st != 42 {
		t.Fatalf("stop during backoff: exit status = %d, want 42", st)
	}

	dir2 := t.TempDir()
	w := writeFile(t, dir2, "w.sh", "#!/bin/sh\ntrap '' TERM\necho ok > "+dir2+"/ready\nwhile :; do sleep 0.02; done\n", 0o755)
	s2 := startPID1(t, nil, "--grace-period", "200ms", "--", w)
	waitFor(t, "workload ready", 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir2, "ready"))
		return err == nil
	})
	s2.signal(syscall.SIGTERM)
	if st := s2.wait(10 * time.Second); st != 137 {
		t.Fatalf("grace: exit status = %d, want 137", st)
	}
}

func TestPID1ExecFailure(t *testing.T) {
	s := startPID1Raw(t, "--", "no-such-command-xyz")
	if st := s.wait(10 * time.Second); st != 127 {
		t.Fatalf("exit status = %d, want 127", st)
	}
	if !strings.Contains(s.stderr.String(), "no-such-command-xyz: command not found") {
		t.Errorf("stderr %q lacks the command name", s.stderr.String())
	}
}

// startPID1Raw is startPID1 for a supervisor that may exit before the
// test can find it.
func startPID1Raw(t *testing.T, args ...string) *sup {
	requirePIDNamespace(t)
	return start(t, nil, append([]string{"unshare", "--pid", "--fork", "--mount-proc", bin}, args...)...)
}

// TestPID1LeavesNothingOfARunToTheNext: as PID 1 every orphan comes to
// the supervisor, including a helper that left the workload's session with
// setsid. Each run counts the helpers of earlier runs that still run; a
// new container would have none.
func TestPID1LeavesNothingOfARunToTheNext(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "cfg.yaml", restart42, 0o644)
	w := writeFile(t, dir, "w.sh", `#!/bin/sh
n=$(cat `+dir+`/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > `+dir+`/count
echo "run $n: $(pgrep -c -f 'sleep 1001') helpers" >> `+dir+`/seen
setsid sleep 1001 &
while ! pgrep -f 'sleep 1001' >/dev/null; do sleep 0.01; done
[ $n -lt 4 ] && exit 42
exit 0
`, 0o755)
	s := startPID1(t, nil, "--config", cfg, "--", w)
	if st := s.wait(20 * time.Second); st != 0 {
		t.Fatalf("exit status = %d, want 0", st)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "seen"))
	if want := "run 1: 0 helpers\nrun 2: 0 helpers\nrun 3: 0 helpers\nrun 4: 0 helpers\n"; string(b) != want {
		t.Fatalf("helpers seen by each run:\n%s\nwant:\n%s", b, want)
	}
}

// TestPID1LeavesTheGracePeriodToTheRuntime: as PID 1 the supervisor sets
// no timer of its own by default; a workload that takes its time over
// SIGTERM finishes and its status is passed on.
func TestPID1LeavesTheGracePeriodToTheRuntime(t *testing.T) {
	dir := t.TempDir()
	w := writeFile(t, dir, "w.sh", "#!/bin/sh\ntrap 'sleep 1; exit 0' TERM\necho ok > "+dir+"/ready\nwhile :; do sleep 0.02; done\n", 0o755)
	s := startPID1(t, nil, "--", w)
	waitFor(t, "workload ready", 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, "ready"))
		return err == nil
	})
	s.signal(syscall.SIGTERM)
	if st := s.wait(10 * time.Second); st != 0 {
		t.Fatalf("exit status = %d, want 0", st)
	}
	if !strings.Contains(s.stderr.String(), "gracePeriod=0s") {
		t.Errorf("log does not show that no grace timer was set:\n%s", s.stderr.String())
	}
}
