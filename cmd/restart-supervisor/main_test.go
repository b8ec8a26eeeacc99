package main_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
)

// bin is the supervisor, built once for the whole package.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "restart-supervisor-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "restart-supervisor")
	build := exec.Command("go", "build", "-ldflags=-X github.com/restart-supervisor/restart-supervisor/contract.Version=v0.0.0-test", "-o", bin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the supervisor:", err)
		os.Exit(1)
	}
	// restart-probe next to the supervisor, where install finds it and
	// the supervisor runs it.
	probe := exec.Command("go", "build", "-o", filepath.Join(dir, "restart-probe"), "../restart-probe")
	probe.Stdout, probe.Stderr = os.Stderr, os.Stderr
	if err := probe.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building restart-probe:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// sup is one running supervisor.
type sup struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *testutil.SyncBuffer
	done   chan struct{}
	status int
	// target receives signals; 0 means the started process itself.
	target int
}

// start runs argv (the supervisor's arguments, or a wrapper such as
// unshare followed by them) with extra environment variables.
func start(t *testing.T, env []string, argv ...string) *sup {
	t.Helper()
	s := &sup{t: t, stderr: &testutil.SyncBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.Stderr = s.stderr
	// A workload left behind by a failed test must not hold the stderr
	// pipe, and with it the test, open.
	s.cmd.WaitDelay = 2 * time.Second
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.cmd.Wait()
		s.status = exitStatus(s.cmd.ProcessState)
		close(s.done)
	}()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			if s.target != 0 {
				syscall.Kill(s.target, syscall.SIGKILL)
			}
			s.cmd.Process.Kill()
			<-s.done
		}
		if t.Failed() {
			t.Logf("supervisor stderr:\n%s", s.stderr.String())
		}
	})
	return s
}

func exitStatus(ps *os.ProcessState) int {
	ws := ps.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// wait waits for the supervisor to exit and returns its status.
func (s *sup) wait(limit time.Duration) int {
	s.t.Helper()
	select {
	case <-s.done:
		return s.status
	case <-time.After(limit):
		s.t.Fatalf("supervisor still running after %s", limit)
		return -1
	}
}

func (s *sup) signal(sig syscall.Signal) {
	s.t.Helper()
	pid := s.target
	if pid == 0 {
		pid = s.cmd.Process.Pid
	}
	if err := syscall.Kill(pid, sig); err != nil {
		s.t.Fatal(err)
	}
}

// waitFor polls until cond holds.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *sup) waitLog(substr string, limit time.Duration) {
	s.t.Helper()
	waitFor(s.t, "log line containing "+strconv.Quote(substr), limit, func() bool {
		return strings.Contains(s.stderr.String(), substr)
	})
}

func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// counterScript is a workload that counts its runs in a state file and
// exits with the n-th of codes (the last one repeats).
func counterScript(t *testing.T, dir string, codes ...int) string {
	t.Helper()
	var cases strings.Builder
	for i, c := range codes[:len(codes)-1] {
		fmt.Fprintf(&cases, "  %d) exit %d ;;\n", i+1, c)
	}
	script := fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/count 2>/dev/null || echo 0)
n=$((n+1))
echo $n > %[1]s/count
echo "$(date +%%s%%N) $n" >> %[1]s/starts
case $n in
%[2]s  *) exit %[3]d ;;
esac
`, dir, cases.String(), codes[len(codes)-1])
	return writeFile(t, dir, "workload.sh", script, 0o755)
}

func runs(t *testing.T, dir string) int {
	return countIn(t, dir, "count")
}

func countIn(t *testing.T, dir, file string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

const restart42 = `restartPolicy: Never
restartPolicyRules:
- action: Restart
  exitCodes: {operator: In, values: [42]}
podRestartPolicy: Never
backoff: {initial: 0s, max: 0s}
`

func TestRestartsOnMatchingExitCodeOnly(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "cfg.yaml", restart42, 0o644)
	w := counterScript(t, dir, 42, 42, 1, 0)
	s := start(t, nil, bin, "--config", cfg, "--", w)
	if got := s.wait(20 * time.Second); got != 1 {
		t.Fatalf("exit status = %d, want 1 (the first exit that no rule restarts)", got)
	}
	if n := runs(t, dir); n != 3 {
		t.Fatalf("workload ran %d times, want 3 (two restarts on 42, none on 1)", n)
	}
	log := s.stderr.String()
	for _, want := range []string{
		`exitCode=42`, `rule=0 action=Restart decidedBy=rule handling=restartInPlace restarts=1 delay=0s`,
		`handling=restartInPlace restarts=2`,
		`exitCode=1 ranFor=`, `rule=-1 action="" decidedBy=containerPolicy handling=handOver restarts=2`,
		`msg="supervisor exiting" logger=restart-supervisor status=1 restarts=2`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if c := strings.Count(log, `msg="workload started"`); c != 3 {
		t.Errorf("%d start lines, want 3", c)
	}
}

func TestNotInRestartsEverythingButListedCodes(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"restartPolicy":"Never","podRestartPolicy":"Never",
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"NotIn","values":[0,7]}}],
	  "backoff":{"initial":"0s"}}`
	w := counterScript(t, dir, 3, 137, 255, 7)
	s := start(t, []string{"RESTART_SUPERVISOR_CONFIG=" + cfg}, bin, "--", w)
	if got := s.wait(20 * time.Second); got != 7 {
		t.Fatalf("exit status = %d, want 7", got)
	}
	if n := runs(t, dir); n != 4 {
		t.Fatalf("workload ran %d times, want 4", n)
	}
	if !strings.Contains(s.stderr.String(), "status=7 restarts=3") {
		t.Errorf("final line lacks status=7 restarts=3")
	}
}

func TestNoConfigBehavesLikeTini(t *testing.T) {
	for _, code := range []int{0, 1, 42, 255} {
		s := start(t, nil, bin, "--", "sh", "-c", "exit "+strconv.Itoa(code))
		if got := s.wait(10 * time.Second); got != code {
			t.Errorf("exit %d: supervisor exited %d", code, got)
		}
	}
}

func TestSignalDeathIs128PlusSignalAndMatchesRules(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"0s"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[137]}}]}`
	// The first run kills itself with SIGKILL (137, restarted), the second
	// with SIGSEGV (139, handed over).
	w := writeFile(t, dir, "w.sh", fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/count
[ $n = 1 ] && kill -KILL $$
kill -SEGV $$
`, dir), 0o755)
	s := start(t, []string{"RESTART_SUPERVISOR_CONFIG=" + cfg}, bin, "--", w)
	if got := s.wait(10 * time.Second); got != 139 {
		t.Fatalf("exit status = %d, want 139 (128+SIGSEGV)", got)
	}
	log := s.stderr.String()
	if !strings.Contains(log, "exitCode=137 signal=SIGKILL") || !strings.Contains(log, "exitCode=139 signal=SIGSEGV") {
		t.Errorf("log lacks the signal exits")
	}
	if n := runs(t, dir); n != 2 {
		t.Errorf("workload ran %d times, want 2", n)
	}
}

func TestBackoffDoublesToCapAndResets(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "cfg.yaml", `restartPolicy: OnFailure
podRestartPolicy: Never
backoff: {initial: 150ms, max: 300ms, resetAfter: 1h}
`, 0o644)
	w := counterScript(t, dir, 1, 1, 1, 1, 0)
	s := start(t, nil, bin, "--config", cfg, "--", w)
	if got := s.wait(20 * time.Second); got != 0 {
		t.Fatalf("exit status = %d, want 0", got)
	}
	log := s.stderr.String()
	var delays []string
	for _, line := range strings.Split(log, "\n") {
		if i := strings.Index(line, " delay="); i >= 0 {
			delays = append(delays, line[i+len(" delay="):])
		}
	}
	if got, want := strings.Join(delays, ","), "0s,150ms,300ms,300ms"; got != want {
		t.Fatalf("delays %s, want %s (first restart immediate, then doubling to the cap)", got, want)
	}
	// The starts themselves must honour the delays (lower bounds only:
	// machines are slow, never fast).
	b, _ := os.ReadFile(filepath.Join(dir, "starts"))
	var ts []int64
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		v, _ := strconv.ParseInt(strings.Fields(line)[0], 10, 64)
		ts = append(ts, v)
	}
	if len(ts) != 5 {
		t.Fatalf("%d starts, want 5", len(ts))
	}
	for i, min := range []time.Duration{0, 150 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond} {
		if gap := time.Duration(ts[i+1] - ts[i]); gap < min {
			t.Errorf("start %d came %s after start %d, want at least %s", i+2, gap, i+1, min)
		}
	}

	// A run that lasts resetAfter forgets the backoff: every delay is 0.
	dir2 := t.TempDir()
	cfg2 := writeFile(t, dir2, "cfg.yaml", `restartPolicy: OnFailure
podRestartPolicy: Never
backoff: {initial: 5s, resetAfter: 50ms}
`, 0o644)
	w2 := writeFile(t, dir2, "w.sh", fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/count
sleep 0.1
[ $n -lt 4 ] && exit 1
exit 0
`, dir2), 0o755)
	s2 := start(t, nil, bin, "--config", cfg2, "--", w2)
	if got := s2.wait(20 * time.Second); got != 0 {
		t.Fatalf("exit status = %d, want 0", got)
	}
	if c := strings.Count(s2.stderr.String(), "delay=0s"); c != 3 {
		t.Errorf("%d restarts with delay 0s, want 3: runs longer than resetAfter reset the backoff", c)
	}
}

// trapScript reports the signals it receives to dir/got and then keeps
// running; it exits 7 on SIGTERM.
func trapScript(t *testing.T, dir string) string {
	return writeFile(t, dir, "trap.sh", fmt.Sprintf(`#!/bin/sh
for s in HUP INT QUIT USR1 USR2 WINCH CONT ALRM; do
  trap "echo $s >> %[1]s/got" $s
done
trap 'echo TERM >> %[1]s/got; exit 7' TERM
echo $$ > %[1]s/ready
while :; do sleep 0.02; done
`, dir), 0o755)
}

func TestSignalsAreForwardedAndStopNeverRestarts(t *testing.T) {
	dir := t.TempDir()
	// Every exit matches a Restart rule, yet SIGTERM must end supervision.
	cfg := `{"restartPolicy":"Always","podRestartPolicy":"Never",
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"NotIn","values":[]}}]}`
	s := start(t, []string{"RESTART_SUPERVISOR_CONFIG=" + cfg}, bin, "--", trapScript(t, dir))
	testForwarding(t, s, dir)
}

func testForwarding(t *testing.T, s *sup, dir string) {
	t.Helper()
	waitFor(t, "workload ready", 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, "ready"))
		return err == nil
	})
	got := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "got"))
		return string(b)
	}
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGQUIT, syscall.SIGALRM} {
		name := strings.TrimPrefix(sigName(sig), "SIG")
		s.signal(sig)
		waitFor(t, name+" to reach the workload", 10*time.Second, func() bool { return strings.Contains(got(), name+"\n") })
	}
	s.signal(syscall.SIGTERM)
	if st := s.wait(10 * time.Second); st != 7 {
		t.Fatalf("exit status = %d, want 7 (the workload's status after SIGTERM)", st)
	}
	if strings.Contains(s.stderr.String(), "restarting in place") {
		t.Fatalf("the workload was restarted after a stop request")
	}
}

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGUSR1:
		return "SIGUSR1"
	case syscall.SIGUSR2:
		return "SIGUSR2"
	case syscall.SIGWINCH:
		return "SIGWINCH"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGALRM:
		return "SIGALRM"
	}
	return sig.String()
}

func TestSIGINTIsAStopToo(t *testing.T) {
	cfg := `{"restartPolicy":"Always","podRestartPolicy":"Never"}`
	s := start(t, []string{"RESTART_SUPERVISOR_CONFIG=" + cfg}, bin, "--", "sleep", "30")
	s.waitLog("workload started", 10*time.Second)
	s.signal(syscall.SIGINT)
	if st := s.wait(10 * time.Second); st != 130 {
		t.Fatalf("exit status = %d, want 130 (sleep killed by the forwarded SIGINT)", st)
	}
}

func TestStopDuringBackoffExitsAtOnce(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"1h","max":"1h"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`
	s := start(t, []string{"RESTART_SUPERVISOR_CONFIG=" + cfg}, bin, "--", counterScript(t, dir, 42))
	s.waitLog("delay=1h0m0s", 10*time.Second)
	s.signal(syscall.SIGTERM)
	if st := s.wait(10 * time.Second); st != 42 {
		t.Fatalf("exit status = %d, want 42 (the last workload status)", st)
	}
	if n := runs(t, dir); n != 2 {
		t.Fatalf("workload ran %d times, want 2 (immediate first restart, then the stop)", n)
	}
}

func TestGracePeriodEndsInSIGKILL(t *testing.T) {
	dir := t.TempDir()
	// The workload and its child ignore SIGTERM.
	w := writeFile(t, dir, "w.sh", fmt.Sprintf(`#!/bin/sh
trap '' TERM
sleep 60 &
echo $! > %[1]s/child
echo ok > %[1]s/ready
while :; do sleep 0.02; done
`, dir), 0o755)
	s := start(t, nil, bin, "--grace-period", "300ms", "--", w)
	waitFor(t, "workload ready", 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, "ready"))
		return err == nil
	})
	began := time.Now()
	s.signal(syscall.SIGTERM)
	if st := s.wait(10 * time.Second); st != 137 {
		t.Fatalf("exit status = %d, want 137", st)
	}
	if el := time.Since(began); el < 300*time.Millisecond {
		t.Errorf("exited %s after SIGTERM, before the 300ms grace period", el)
	}
	if !strings.Contains(s.stderr.String(), "grace period expired") {
		t.Errorf("log lacks the grace period expiry")
	}
	b, _ := os.ReadFile(filepath.Join(dir, "child"))
	if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 && syscall.Kill(pid, 0) == nil {
		t.Errorf("the workload's background child %d survived", pid)
	}
}

func TestGroupIsKilledBeforeRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "cfg.yaml", restart42, 0o644)
	w := writeFile(t, dir, "w.sh", fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/count
if [ $n = 1 ]; then sleep 60 & echo $! > %[1]s/child; exit 42; fi
# Second run: is the first run's child gone?
if kill -0 $(cat %[1]s/child) 2>/dev/null; then exit 10; fi
exit 0
`, dir), 0o755)
	s := start(t, nil, bin, "--config", cfg, "--", w)
	if st := s.wait(10 * time.Second); st != 0 {
		t.Fatalf("exit status = %d, want 0 (10 means the first run's child was still alive)", st)
	}
}

func TestHoldWhenKubeletWouldRestart(t *testing.T) {
	// Container Never in a pod Always: the kubelet would restart the
	// container if the supervisor exited, so it holds.
	cfg := `{"restartPolicy":"Never","podRestartPolicy":"Always"}`
	s := start(t, []string{"RESTART_SUPERVISOR_CONFIG=" + cfg}, bin, "--", "sh", "-c", "exit 3")
	s.waitLog("handling=hold", 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	select {
	case <-s.done:
		t.Fatalf("supervisor exited (%d) instead of holding", s.status)
	default:
	}
	s.signal(syscall.SIGTERM)
	if st := s.wait(10 * time.Second); st != 3 {
		t.Fatalf("exit status = %d, want 3", st)
	}
}

func TestExecFailures(t *testing.T) {
	dir := t.TempDir()
	notExec := writeFile(t, dir, "plain.txt", "#!/bin/sh\nexit 0\n", 0o644)
	for _, tc := range []struct {
		cmd    string
		status int
		msg    string
	}{
		{"no-such-command-xyz", 127, "restart-supervisor: no-such-command-xyz: command not found"},
		{filepath.Join(dir, "missing"), 127, "missing: command not found"},
		{notExec, 126, notExec + ": permission denied"},
		{dir, 126, dir + ":"},
	} {
		out, err := exec.Command(bin, "--", tc.cmd).CombinedOutput()
		st := 0
		if err != nil {
			st = exitStatus(err.(*exec.ExitError).ProcessState)
		}
		if st != tc.status || !strings.Contains(string(out), tc.msg) {
			t.Errorf("%s: status %d, output %q; want %d and %q", tc.cmd, st, out, tc.status, tc.msg)
		}
	}
}

// zombiesUnder counts zombie processes among the descendants of root.
func zombiesUnder(t *testing.T, root int) (zombies, total int) {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	state := map[int]byte{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+2:])
		ppid, _ := strconv.Atoi(f[1])
		parent[pid], state[pid] = ppid, f[0][0]
	}
	for pid := range parent {
		for p := parent[pid]; p > 0; p = parent[p] {
			if p == root {
				total++
				if state[pid] == 'Z' {
					zombies++
				}
				break
			}
		}
	}
	return zombies, total
}

// hostPID translates a pid as seen inside a child PID namespace (the
// last NSpid field) into the pid this test sees; pids of our own namespace
// map to themselves.
func hostPID(nspid string) string {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 2 && f[0] == "NSpid:" && f[len(f)-1] == nspid {
				return e.Name()
			}
		}
	}
	return nspid
}

// orphanScript forks n orphans: each subshell exits at once and leaves its
// sleep behind, which re-parents to the supervisor.
func orphanScript(t *testing.T, dir string, n int) string {
	return writeFile(t, dir, "orphans.sh", fmt.Sprintf(`#!/bin/sh
i=0
while [ $i -lt %[2]d ]; do (sleep 0.2 &); i=$((i+1)); done
(sleep 1 & echo $! > %[1]s/witness)
echo done > %[1]s/ready
exec sleep 60
`, dir, n), 0o755)
}

func TestThousandOrphansLeaveNoZombies(t *testing.T) {
	dir := t.TempDir()
	s := start(t, nil, bin, "--", orphanScript(t, dir, 1000))
	checkNoZombies(t, dir, s.cmd.Process.Pid)
	s.signal(syscall.SIGTERM)
	if st := s.wait(10 * time.Second); st != 143 {
		t.Fatalf("exit status = %d, want 143", st)
	}
}

func checkNoZombies(t *testing.T, dir string, root int) {
	t.Helper()
	waitFor(t, "1000 orphans forked", 60*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, "ready"))
		return err == nil
	})
	// The orphans re-parent to the supervisor (as PID 1 or subreaper), so
	// they are its to reap.
	b, _ := os.ReadFile(filepath.Join(dir, "witness"))
	witness := hostPID(strings.TrimSpace(string(b)))
	if st, err := os.ReadFile("/proc/" + witness + "/stat"); err == nil {
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+2:]))
		if f[1] != strconv.Itoa(root) {
			t.Fatalf("orphan %s has parent %s, want the supervisor %d", witness, f[1], root)
		}
	} else {
		t.Fatalf("orphan %q already gone: %v", witness, err)
	}
	// Once every orphan's sleep is over only the workload is left, and no
	// zombie: all 1000 were reaped.
	var z, n int
	waitFor(t, "orphans reaped", 20*time.Second, func() bool {
		z, n = zombiesUnder(t, root)
		return z == 0 && n <= 2
	})
	if z != 0 {
		t.Fatalf("%d zombies left", z)
	}
}

func TestOutputPassesThroughByteExactAndUnbuffered(t *testing.T) {
	dir := t.TempDir()
	var data bytes.Buffer
	for i := 0; i < 4096; i++ {
		data.WriteByte(byte(i * 7))
	}
	data.WriteString("\r\n\x00no newline at the end")
	in := writeFile(t, dir, "in.bin", data.String(), 0o644)
	out, err := exec.Command(bin, "--", "cat", in).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, data.Bytes()) {
		t.Fatalf("stdout differs: got %d bytes, want %d", len(out), data.Len())
	}

	// stdin passes through too.
	c := exec.Command(bin, "--", "cat")
	c.Stdin = bytes.NewReader(data.Bytes())
	out, err = c.Output()
	if err != nil || !bytes.Equal(out, data.Bytes()) {
		t.Fatalf("stdin→stdout differs (%v): got %d bytes", err, len(out))
	}

	// Bytes are visible while the workload still runs: no buffering.
	c = exec.Command(bin, "--", "sh", "-c", "printf 'partial'; sleep 30")
	r, w, _ := os.Pipe()
	c.Stdout = w
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	defer func() { c.Process.Signal(syscall.SIGTERM); c.Wait() }()
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 64)
		n, _ := r.Read(buf)
		got <- string(buf[:n])
	}()
	select {
	case s := <-got:
		if s != "partial" {
			t.Fatalf("read %q, want \"partial\"", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("output not visible while the workload runs")
	}
}

func TestInstallCopiesItselfAtomically(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	out, err := exec.Command(bin, "install", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("install: %v: %s", err, out)
	}
	dst := filepath.Join(dir, "restart-supervisor")
	fi, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o555 {
		t.Errorf("mode %v, want 0555", fi.Mode().Perm())
	}
	a, _ := os.ReadFile(bin)
	b, _ := os.ReadFile(dst)
	if !bytes.Equal(a, b) {
		t.Errorf("installed copy differs from the binary")
	}
	p1, _ := os.ReadFile(filepath.Join(filepath.Dir(bin), "restart-probe"))
	p2, _ := os.ReadFile(filepath.Join(dir, "restart-probe"))
	if len(p1) == 0 || !bytes.Equal(p1, p2) {
		t.Errorf("restart-probe was not installed next to the supervisor")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("DIR holds %d entries, want only restart-supervisor and restart-probe (no temp files)", len(entries))
	}
	// Installing again over the running copy replaces it.
	if out, err := exec.Command(dst, "install", dir).CombinedOutput(); err != nil {
		t.Fatalf("reinstall: %v: %s", err, out)
	}
	v, err := exec.Command(dst, "version").Output()
	if err != nil || !strings.HasPrefix(string(v), "restart-supervisor v0.0.0-test ") {
		t.Fatalf("installed copy's version: %q, %v", v, err)
	}
	if out, err := exec.Command(bin, "install").CombinedOutput(); exitCode(err) != 2 {
		t.Errorf("install without DIR: %v %s, want exit 2", err, out)
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return exitStatus(ee.ProcessState)
	}
	return -1
}

func TestUsageAndConfigErrorsExit2WithOneLine(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.yaml", restart42, 0o644)
	plat := runtime.GOOS + "/" + runtime.GOARCH
	// A FIFO without a writer used to block start-up for ever, /dev/zero
	// to take 2 GB in a second.
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"bad operator", []string{`RESTART_SUPERVISOR_CONFIG={"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"Foo","values":[1]}}]}`},
			[]string{"--", "true"}, `invalid config (RESTART_SUPERVISOR_CONFIG): restartPolicyRules[0].exitCodes.operator: Unsupported value: "Foo": supported values: "In", "NotIn"`},
		{"rules without policy", []string{`RESTART_SUPERVISOR_CONFIG={"restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[1]}}]}`},
			[]string{"--", "true"}, `restartPolicy: Required value: must specify restartPolicy when restart rules are used`},
		{"unknown key", nil, []string{"--config", writeFile(t, dir, "unknown.yaml", "restartPolicy: Never\nbackof: {initial: 1s}\n", 0o644), "--", "true"},
			`backof: unknown field`},
		{"bad duration", nil, []string{"--config", writeFile(t, dir, "dur.yaml", "backoff: {initial: soon}\n", 0o644), "--", "true"},
			`backoff.initial`},
		{"missing file", nil, []string{"--config", filepath.Join(dir, "nope.yaml"), "--", "true"}, `--config: open`},
		{"FIFO", nil, []string{"--config", fifo, "--", "true"}, `fifo.yaml: not a regular file`},
		{"/dev/zero", nil, []string{"--config", "/dev/zero", "--", "true"}, `/dev/zero: not a regular file`},
		{"huge file", nil, []string{"--config", writeFile(t, dir, "huge.yaml", strings.Repeat("restartPolicy: Never\n", 1<<20), 0o644), "--", "true"},
			`huge.yaml: 22020096 bytes: larger than 65536 bytes`},
		{"repeated keys", nil, []string{"--config", writeFile(t, dir, "dup.yaml", strings.Repeat("restartPolicy: Never\n", 2000), 0o644), "--", "true"},
			`restartPolicy: Duplicate value (line 2): already set at line 1`},
		{"huge inline", []string{"RESTART_SUPERVISOR_CONFIG=" + strings.Repeat(" ", 100<<10) + "{}"}, []string{"--", "true"},
			`larger than 65536 bytes`},
		{"both sources", []string{"RESTART_SUPERVISOR_CONFIG={}"}, []string{"--config", good, "--", "true"}, `both --config and RESTART_SUPERVISOR_CONFIG are set`},
		{"bad config watch", []string{"RESTART_SUPERVISOR_CONFIG_WATCH=fanotify"}, []string{"--config", good, "--", "true"},
			`--config-watch: "fanotify" is neither poll nor inotify`},
		{"1.34 wording", nil, []string{"--kubernetes-version", "1.34", "--config", writeFile(t, dir, "all.yaml", "restartPolicy: Never\nrestartPolicyRules:\n- {action: RestartAllContainers, exitCodes: {operator: In, values: [1]}}\n", 0o644), "--", "true"},
			`invalid config (--config ` + filepath.Join(dir, "all.yaml") + `): restartPolicyRules[0].action: Unsupported value: "RestartAllContainers": supported values: "Restart"`},
		{"1.35 from the environment", []string{"RESTART_SUPERVISOR_KUBERNETES_VERSION=v1.35.4", `RESTART_SUPERVISOR_CONFIG={"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[` + strings.Repeat("1,", 255) + `1]}}]}`},
			[]string{"--", "true"}, `restartPolicyRules[0].exitCodes.values: Too long: may not be more than 255 bytes`},
		{"newest by default", []string{`RESTART_SUPERVISOR_CONFIG={"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[` + strings.Repeat("1,", 255) + `1]}}]}`},
			[]string{"--", "true"}, `restartPolicyRules[0].exitCodes.values: Too many: 256: must have at most 255 items`},
		{"unknown version", nil, []string{"--kubernetes-version", "1.33", "--", "true"}, `known versions are 1.34, 1.35, 1.36, 1.37`},
		{"bad version in the environment", []string{"RESTART_SUPERVISOR_KUBERNETES_VERSION=latest"}, []string{"--", "true"},
			`RESTART_SUPERVISOR_KUBERNETES_VERSION: version "latest": want a Kubernetes release 1.N`},
		{"bad flag", nil, []string{"--no-such-flag", "--", "true"}, `flag provided but not defined: -no-such-flag`},
		{"bad grace", nil, []string{"--grace-period", "-1s", "--", "true"}, `--grace-period: must not be negative`},
		{"bad log format", nil, []string{"--log-format", "xml", "--", "true"}, `--log-format: unsupported value "xml"`},
		{"bad stop signal", nil, []string{"--stop-signals", "SIGNOPE", "--", "true"}, `--stop-signals: unsupported signal "SIGNOPE"`},
		{"no command", nil, []string{"--"}, `no command given`},
		{"no platform entry", []string{`RESTART_SUPERVISOR_PLATFORM_COMMANDS={"plan9/mips":["/x"],"windows/amd64":["/y"]}`}, []string{"--"},
			`RESTART_SUPERVISOR_PLATFORM_COMMANDS: no entry for platform ` + plat + `; available: plan9/mips, windows/amd64`},
		{"bad platform json", []string{`RESTART_SUPERVISOR_PLATFORM_COMMANDS=[1]`}, []string{"--"}, `RESTART_SUPERVISOR_PLATFORM_COMMANDS: want a JSON object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := exec.Command(bin, tc.args...)
			c.Env = append(os.Environ(), tc.env...)
			var stderr bytes.Buffer
			c.Stderr = &stderr
			err := c.Run()
			if code := exitCode(err); code != 2 {
				t.Fatalf("exit %d, want 2; stderr %q", code, stderr.String())
			}
			msg := stderr.String()
			if strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "restart-supervisor: ") {
				t.Errorf("stderr is not one line: %q", msg)
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("stderr %q lacks %q", msg, tc.want)
			}
		})
	}
}

func TestPlatformCommandIsPrependedToArgs(t *testing.T) {
	plat := runtime.GOOS + "/" + runtime.GOARCH
	pc := fmt.Sprintf(`{"plan9/mips":["false"],%q:["sh","-c","exit $0"]}`, plat)
	c := exec.Command(bin, "--", "9")
	c.Env = append(os.Environ(), "RESTART_SUPERVISOR_PLATFORM_COMMANDS="+pc)
	if code := exitCode(c.Run()); code != 9 {
		t.Fatalf("exit %d, want 9 (sh -c 'exit $0' 9)", code)
	}
}

func TestJSONLogsAndStatusFile(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o755)
	cfg := writeFile(t, dir, "cfg.yaml", restart42, 0o644)
	term := writeFile(t, dir, "termination-log", "", 0o644)
	s := start(t, []string{"RESTART_SUPERVISOR_STATE_DIR=" + state, "RESTART_SUPERVISOR_CONTAINER_NAME=app"},
		bin, "--config", cfg, "--log-format", "json", "--termination-message-path", term, "--", counterScript(t, dir, 42, 5))
	if st := s.wait(10 * time.Second); st != 5 {
		t.Fatalf("exit status = %d, want 5", st)
	}
	for _, line := range strings.Split(strings.TrimSpace(s.stderr.String()), "\n") {
		if !strings.HasPrefix(line, "{") || !strings.Contains(line, `"container":"app"`) {
			t.Errorf("not a JSON log line naming the container: %s", line)
		}
	}
	if !strings.Contains(s.stderr.String(), `"exitCode":42,"ranFor":`) || !strings.Contains(s.stderr.String(), `"rule":0,"action":"Restart"`) {
		t.Errorf("JSON log lacks the exit fields")
	}
	b, err := os.ReadFile(filepath.Join(state, "status", "app.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"container":"app"`, `"state":"exited"`, `"restarts":1`, `"lastExit":{"code":5,`, `"lastRestart":{"code":42,"rule":0,"action":"Restart",`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("status document %s lacks %s", b, want)
		}
	}
	out, err := exec.Command(bin, "status", "--state-dir", state).Output()
	if err != nil || !strings.Contains(string(out), "app") || !strings.Contains(string(out), "exited") {
		t.Errorf("status: %q %v", out, err)
	}
	if msg, _ := os.ReadFile(term); string(msg) != "restart-supervisor: 1 in-place restart; last exit 42 (rule 0 Restart); final exit 5" {
		t.Errorf("termination message %q", msg)
	}
}

// TestExampleExit42 runs examples/exit42 as examples/run.sh does.
func TestExampleExit42(t *testing.T) {
	state := t.TempDir()
	s := start(t, []string{"EXAMPLE_STATE_DIR=" + state}, bin,
		"--config", "../../examples/exit42/config.yaml", "--", "../../examples/exit42/workload.sh")
	if st := s.wait(20 * time.Second); st != 0 {
		t.Fatalf("exit status = %d, want 0", st)
	}
	log := s.stderr.String()
	if c := strings.Count(log, "restarting in place"); c != 2 {
		t.Fatalf("%d in-place restarts logged, want 2", c)
	}
	if !strings.Contains(log, "delay=500ms") || !strings.Contains(log, "status=0 restarts=2") {
		t.Fatalf("log lacks the backoff or the final line")
	}
}

// TestGracePeriodFromEnvironment: the injector passes the pod's
// terminationGracePeriodSeconds through the environment when the
// supervisor is not PID 1 (a shared PID namespace).
func TestGracePeriodFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	w := writeFile(t, dir, "w.sh", "#!/bin/sh\ntrap '' TERM\necho ok > "+dir+"/ready\nwhile :; do sleep 0.02; done\n", 0o755)
	s := start(t, []string{"RESTART_SUPERVISOR_GRACE_PERIOD=300ms"}, bin, "--", w)
	waitFor(t, "workload ready", 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, "ready"))
		return err == nil
	})
	s.signal(syscall.SIGTERM)
	if st := s.wait(10 * time.Second); st != 137 {
		t.Fatalf("exit status = %d, want 137", st)
	}
	if !strings.Contains(s.stderr.String(), "gracePeriod=300ms") {
		t.Errorf("log lacks gracePeriod=300ms:\n%s", s.stderr.String())
	}
}

// TestStartErrorUnderKubelet: inside a Kubernetes pod a command that
// cannot be executed is exit code 128 for the rules, as containerd
// reports it; outside (or with --start-error=shell) the shell's 127.
func TestStartErrorUnderKubelet(t *testing.T) {
	kube := []string{"KUBERNETES_SERVICE_HOST=127.0.0.1",
		`RESTART_SUPERVISOR_CONFIG={"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"50ms","max":"50ms"},
		  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"NotIn","values":[0]}}]}`}
	s := start(t, kube, bin, "--", "no-such-command-xyz")
	waitFor(t, "three attempts", 10*time.Second, func() bool {
		return strings.Count(s.stderr.String(), "cannot start workload") >= 3
	})
	s.signal(syscall.SIGTERM)
	if st := s.wait(10 * time.Second); st != 128 {
		t.Fatalf("retried start error: exit status = %d, want 128\n%s", st, s.stderr.String())
	}
	if !strings.Contains(s.stderr.String(), "exitCode=128 ranFor=0s rule=0 action=Restart") {
		t.Errorf("log does not show exit 128 judged by rule 0:\n%s", s.stderr.String())
	}

	noRules := []string{"KUBERNETES_SERVICE_HOST=127.0.0.1", `RESTART_SUPERVISOR_CONFIG={"podRestartPolicy":"Never"}`}
	if st := start(t, noRules, bin, "--", "no-such-command-xyz").wait(10 * time.Second); st != 128 {
		t.Fatalf("start error handed over: exit status = %d, want 128", st)
	}
	if st := start(t, noRules, bin, "--start-error", "shell", "--", "no-such-command-xyz").wait(10 * time.Second); st != 127 {
		t.Fatalf("--start-error shell: exit status = %d, want 127", st)
	}
}

// TestBackoffContinuesAcrossHandOver: the kubelet keeps one back-off per
// container across all its exits. Under container Always + Restart In
// [42] in a pod Always, exits 42, 42, 1, 42, 42 wait 0, 1, 2, 4, 8 units
// upstream. The exit 1 is handed over and the kubelet starts a new
// supervisor, which must continue the curve from the state volume instead
// of starting over at 0.
func TestBackoffContinuesAcrossHandOver(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	env := []string{"RESTART_SUPERVISOR_STATE_DIR=" + state, "RESTART_SUPERVISOR_CONTAINER_NAME=trainer",
		`RESTART_SUPERVISOR_CONFIG={"restartPolicy":"Always","podRestartPolicy":"Always","backoff":{"initial":"200ms","max":"10s"},
		  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`}
	w := writeFile(t, dir, "w.sh", `#!/bin/sh
n=$(cat `+dir+`/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > `+dir+`/count
case $n in 3) exit 1 ;; 1|2|4|5) exit 42 ;; esac
exec sleep 60
`, 0o755)
	first := start(t, env, bin, "--", w)
	if st := first.wait(10 * time.Second); st != 1 {
		t.Fatalf("first supervisor: exit status %d, want 1 (handed over)", st)
	}
	for _, want := range []string{"restarts=1 delay=0s", "restarts=2 delay=200ms"} {
		if !strings.Contains(first.stderr.String(), want) {
			t.Fatalf("first supervisor's log lacks %q:\n%s", want, first.stderr.String())
		}
	}
	// The kubelet restarts the container at once (its own count saw one
	// exit); the new supervisor waits the rest of the third delay.
	second := start(t, env, bin, "--", w)
	second.waitLog("restarts=2 delay=1.6s", 15*time.Second)
	out := second.stderr.String()
	for _, want := range []string{"continuing the container's back-off from its last exit", "delay=400ms", "restarts=1 delay=800ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("second supervisor's log lacks %q:\n%s", want, out)
		}
	}
	second.signal(syscall.SIGTERM)
	second.wait(10 * time.Second)
}

// TestInitSignals: natively the workload is its PID namespace's init, and
// a SIGTERM from the runtime reaches it only if it has a handler. With
// --init-signals, sleep (no handler) ignores the stop and is killed at the
// end of the grace period (137), a shell with a trap gets it (0); by
// default sleep dies of SIGTERM at once (143).
func TestInitSignals(t *testing.T) {
	dir := t.TempDir()
	trap := writeFile(t, dir, "trap.sh", "#!/bin/sh\ntrap 'exit 0' TERM\necho ok > "+dir+"/ready\nwhile :; do sleep 0.02; done\n", 0o755)
	for _, tc := range []struct {
		name  string
		args  []string
		ready func() bool
		want  int
	}{
		{"sleep, init signals", []string{"--init-signals", "--grace-period", "500ms", "--", "sleep", "60"}, nil, 137},
		{"sleep, default", []string{"--grace-period", "5s", "--", "sleep", "60"}, nil, 143},
		{"trap, init signals", []string{"--init-signals", "--grace-period", "5s", "--", trap}, func() bool {
			_, err := os.Stat(filepath.Join(dir, "ready"))
			return err == nil
		}, 0},
	} {
		s := start(t, nil, append([]string{bin}, tc.args...)...)
		s.waitLog("workload started", 10*time.Second)
		if tc.ready != nil {
			waitFor(t, "workload ready", 10*time.Second, tc.ready)
		} else {
			time.Sleep(100 * time.Millisecond)
		}
		s.signal(syscall.SIGTERM)
		if st := s.wait(10 * time.Second); st != tc.want {
			t.Errorf("%s: exit status %d, want %d", tc.name, st, tc.want)
		}
	}
}

// TestTerminationMessagePerRun: the kubelet gives every container instance
// an empty termination message file, so a message one run wrote is never
// another's. Run 1 writes one and exits 42; run 2 writes nothing and exits
// 5: the final message is the supervisor's summary alone, not run 1's.
// A run that writes its own message keeps it, with the summary after it.
func TestTerminationMessagePerRun(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "cfg.yaml", restart42, 0o644)
	term := writeFile(t, dir, "termination-log", "", 0o644)
	w := writeFile(t, dir, "w.sh", fmt.Sprintf(`#!/bin/sh
case $RESTART_SUPERVISOR_RESTART_COUNT in
0) echo "run 1: retriable" > %[1]s; exit 42 ;;
1) exit 42 ;;
esac
echo "run 3: fatal" > %[1]s
exit 5
`, term), 0o755)
	s := start(t, nil, bin, "--config", cfg, "--termination-message-path", term, "--", w)
	if st := s.wait(30 * time.Second); st != 5 {
		t.Fatalf("exit status = %d, want 5; log:\n%s", st, s.stderr.String())
	}
	want := "run 3: fatal\nrestart-supervisor: 2 in-place restarts; last exit 42 (rule 0 Restart); final exit 5"
	if msg, _ := os.ReadFile(term); string(msg) != want {
		t.Fatalf("termination message %q, want %q", msg, want)
	}

	w2 := writeFile(t, dir, "w2.sh", fmt.Sprintf(`#!/bin/sh
[ "$RESTART_SUPERVISOR_RESTART_COUNT" = 0 ] && { echo "run 1: retriable" > %[1]s; exit 42; }
exit 5
`, term), 0o755)
	os.WriteFile(term, nil, 0o644)
	s = start(t, nil, bin, "--config", cfg, "--termination-message-path", term, "--", w2)
	if st := s.wait(30 * time.Second); st != 5 {
		t.Fatalf("exit status = %d, want 5; log:\n%s", st, s.stderr.String())
	}
	want = "restart-supervisor: 1 in-place restart; last exit 42 (rule 0 Restart); final exit 5"
	if msg, _ := os.ReadFile(term); string(msg) != want {
		t.Fatalf("termination message %q, want %q (run 1's message left behind)", msg, want)
	}
}

// TestTerminationMessageFallbackToLogs: under terminationMessagePolicy
// FallbackToLogsOnError the kubelet shows the log's tail for a failed
// exit with an empty message file (kuberuntime_container.go, v1.37.2).
// The summary is then left out, so the file stays empty and the log shows;
// an exit 0 still gets its summary, as under File.
func TestTerminationMessageFallbackToLogs(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "cfg.yaml", restart42, 0o644)
	term := writeFile(t, dir, "termination-log", "", 0o644)
	for _, tc := range []struct {
		last int
		want string
	}{
		{5, ""},
		{0, "restart-supervisor: 1 in-place restart; last exit 42 (rule 0 Restart); final exit 0"},
	} {
		os.WriteFile(term, nil, 0o644)
		w := writeFile(t, dir, "w.sh", fmt.Sprintf(`#!/bin/sh
[ "$RESTART_SUPERVISOR_RESTART_COUNT" = 0 ] && { echo "run 1" > %s; exit 42; }
exit %d
`, term, tc.last), 0o755)
		s := start(t, nil, bin, "--config", cfg, "--termination-message-path", term,
			"--termination-message-policy", "FallbackToLogsOnError", "--", w)
		if st := s.wait(30 * time.Second); st != tc.last {
			t.Fatalf("exit status = %d, want %d; log:\n%s", st, tc.last, s.stderr.String())
		}
		if msg, _ := os.ReadFile(term); string(msg) != tc.want {
			t.Errorf("exit %d: termination message %q, want %q", tc.last, msg, tc.want)
		}
	}
	c := exec.Command(bin, "--termination-message-policy", "Logs", "--", "true")
	var stderr strings.Builder
	c.Stderr = &stderr
	if code := exitCode(c.Run()); code != 2 || !strings.Contains(stderr.String(), "--termination-message-policy") {
		t.Errorf("a bad policy: exit %d, %q; want 2 naming the flag", code, stderr.String())
	}
}

// TestVersionFlag: --version prints what the version subcommand prints;
// followed by anything, it is an unknown supervisor flag (exit 2).
func TestVersionFlag(t *testing.T) {
	want, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"--version", "-version"} {
		got, err := exec.Command(bin, f).Output()
		if err != nil || string(got) != string(want) || !strings.HasPrefix(string(got), "restart-supervisor ") {
			t.Errorf("%s: %q, %v; want %q", f, got, err, want)
		}
	}
	if out, err := exec.Command(bin, "--version", "--", "true").CombinedOutput(); exitCode(err) != 2 {
		t.Errorf("--version -- true: %v %s, want exit 2", err, out)
	}
}
