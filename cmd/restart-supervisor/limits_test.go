package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The limits of the config (rules.Limits): past them an exit the rules
// would restart in place is handed over, the supervisor exits with the
// workload's status, and the status document says why.

// limitsEnv runs container "trainer" with a state directory and the config
// doc: rules that restart every exit in place (Restart NotIn []), pod
// OnFailure (a Job's pod), no back-off, and the limits in extra.
func limitsEnv(state, extra string) []string {
	return []string{"RESTART_SUPERVISOR_STATE_DIR=" + state, "RESTART_SUPERVISOR_CONTAINER_NAME=trainer",
		`RESTART_SUPERVISOR_CONFIG={"restartPolicy":"Never","podRestartPolicy":"OnFailure","backoff":{"initial":"0s","max":"0s"},
		  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"NotIn","values":[]}}]` + extra + `}`}
}

// supArgs runs the supervisor on argv with its termination message next to
// the state directory (a state directory otherwise sends it to
// /dev/termination-log, the kubelet's path).
func supArgs(state string, argv ...string) []string {
	return append([]string{bin, "--termination-message-path", state + ".termination-log", "--"}, argv...)
}

func stateDir(t *testing.T) (dir, state string) {
	dir = t.TempDir()
	state = filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	return dir, state
}

// handOverOf is the status document's handOver.reason and the limits'
// budgetRestarts.
func handOverOf(t *testing.T, state string) (reason string, budget float64) {
	t.Helper()
	d := readStatusDoc(t, state, "trainer")
	if h, ok := d["handOver"].(map[string]any); ok {
		reason, _ = h["reason"].(string)
	}
	if l, ok := d["limits"].(map[string]any); ok {
		budget, _ = l["budgetRestarts"].(float64)
	}
	return reason, budget
}

// TestRestartBudgetHandsOverAndIsNotReset: a budget of 3 restarts a
// workload that always exits 42 three times in place; the fourth exit is
// handed over (exit 42, reason RestartBudgetExhausted in the log and the
// document). The next supervisor of the container, the kubelet's restart
// (restartCount 1), hands its first exit over at once: the budget counts
// across supervisors, as nothing resets a native restartCount.
func TestRestartBudgetHandsOverAndIsNotReset(t *testing.T) {
	dir, state := stateDir(t)
	env := limitsEnv(state, `,"restartBudget":{"maxRestarts":3}`)
	w := counterScript(t, dir, 42)
	s := start(t, env, supArgs(state, w)...)
	if st := s.wait(15 * time.Second); st != 42 {
		t.Fatalf("exit %d, want the workload's 42", st)
	}
	if n := runs(t, dir); n != 4 {
		t.Errorf("%d runs, want 4 (3 restarts in place)", n)
	}
	if !regexp.MustCompile(`level=WARN msg="workload exited; not restarting in place: 3 in-place restarts \(restartBudget.maxRestarts 3\); passing its status on to the kubelet, whose pod restartPolicy decides" .*exitCode=42 .*reason=RestartBudgetExhausted`).MatchString(s.stderr.String()) {
		t.Errorf("no one-line reason for the hand-over:\n%s", s.stderr.String())
	}
	if r, b := handOverOf(t, state); r != "RestartBudgetExhausted" || b != 3 {
		t.Errorf("document: handOver.reason %q, limits.budgetRestarts %v; want RestartBudgetExhausted and 3", r, b)
	}
	if msg, _ := os.ReadFile(state + ".termination-log"); !strings.Contains(string(msg), "; handed over: RestartBudgetExhausted") {
		t.Errorf("termination message %q lacks the reason", msg)
	}

	s = start(t, env, supArgs(state, w)...)
	if st := s.wait(15 * time.Second); st != 42 {
		t.Fatalf("second supervisor: exit %d, want 42", st)
	}
	if n := runs(t, dir); n != 5 {
		t.Errorf("second supervisor: %d runs in all, want 5: the kubelet's restart must not renew the budget", n)
	}
	if r, b := handOverOf(t, state); r != "RestartBudgetExhausted" || b != 3 {
		t.Errorf("second document: handOver.reason %q, limits.budgetRestarts %v; want RestartBudgetExhausted and 3", r, b)
	}
}

// TestRestartBudgetWindow: with a window only the restarts of the last
// window count. The document an earlier supervisor left (written here)
// holds three restarts an hour old, and the budget is 2 in 10m: they do
// not count, the workload restarts twice in place and the third exit is
// handed over. With two restarts a second old the first exit is handed
// over at once, and without a window the three old ones spend a budget
// of 2 at once too.
func TestRestartBudgetWindow(t *testing.T) {
	now := time.Now()
	hourAgo := []time.Time{now.Add(-time.Hour), now.Add(-time.Hour), now.Add(-time.Hour)}
	for _, c := range []struct {
		name   string
		budget string
		recent []time.Time
		runs   int
	}{
		{"old restarts fall out of the window", `{"maxRestarts":2,"window":"10m"}`, hourAgo, 3},
		{"recent restarts count", `{"maxRestarts":2,"window":"10m"}`, []time.Time{now.Add(-time.Second), now.Add(-time.Second)}, 1},
		{"no window counts them all", `{"maxRestarts":2}`, hourAgo, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, state := stateDir(t)
			writeOwnStatus(t, state, "trainer", map[string]any{"container": "trainer", "state": "exited",
				"limits": map[string]any{"budgetRestarts": len(c.recent), "budgetRecent": c.recent}, "updatedAt": now})
			s := start(t, limitsEnv(state, `,"restartBudget":`+c.budget), supArgs(state, counterScript(t, dir, 42))...)
			if st := s.wait(15 * time.Second); st != 42 {
				t.Fatalf("exit %d, want 42", st)
			}
			if n := runs(t, dir); n != c.runs {
				t.Errorf("%d runs, want %d", n, c.runs)
			}
			if r, b := handOverOf(t, state); r != "RestartBudgetExhausted" || b != float64(len(c.recent)+c.runs-1) {
				t.Errorf("document: handOver.reason %q, limits.budgetRestarts %v; want RestartBudgetExhausted and %d", r, b, len(c.recent)+c.runs-1)
			}
		})
	}
}

// TestNoBudgetRestartsForever: the default is upstream's: no limit.
func TestNoBudgetRestartsForever(t *testing.T) {
	dir, state := stateDir(t)
	s := start(t, limitsEnv(state, ""), supArgs(state, counterScript(t, dir, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0))...)
	s.waitLog("restarts=10 ", 15*time.Second)
	if r, _ := handOverOf(t, state); r != "" {
		t.Errorf("handOver.reason %q without limits", r)
	}
	s.signal(syscall.SIGTERM)
	s.wait(10 * time.Second)
}

// TestHandOverExitCodes: 93 is handed over at once although the rules
// restart every exit (runs 1 and 2 exit 1 and restart), and although they
// would hold it (container Never under pod Always): the pod policy decides.
func TestHandOverExitCodes(t *testing.T) {
	dir, state := stateDir(t)
	s := start(t, limitsEnv(state, `,"handOverExitCodes":[93]`), supArgs(state, counterScript(t, dir, 1, 1, 93))...)
	if st := s.wait(15 * time.Second); st != 93 {
		t.Fatalf("exit %d, want 93", st)
	}
	if n := runs(t, dir); n != 3 {
		t.Errorf("%d runs, want 3", n)
	}
	if r, _ := handOverOf(t, state); r != "HandOverExitCode" {
		t.Errorf("handOver.reason %q, want HandOverExitCode", r)
	}
	if !strings.Contains(s.stderr.String(), `not restarting in place: exit code 93 is in handOverExitCodes`) {
		t.Errorf("no reason in the log:\n%s", s.stderr.String())
	}

	held := []string{`RESTART_SUPERVISOR_CONFIG={"restartPolicy":"Never","handOverExitCodes":[93]}`}
	s = start(t, held, bin, "--", "sh", "-c", "exit 93")
	if st := s.wait(15 * time.Second); st != 93 {
		t.Fatalf("under a hold: exit %d, want 93 handed over", st)
	}
	s = start(t, held, bin, "--", "sh", "-c", "exit 3")
	s.waitLog("holding the container idle", 15*time.Second)
	s.signal(syscall.SIGTERM)
	s.wait(10 * time.Second)
}

// checkEnv is limitsEnv with a pre-restart check of command (JSON).
func checkEnv(state, command string, timeout int) []string {
	return limitsEnv(state, fmt.Sprintf(`,"preRestartCheck":{"command":%s,"timeoutSeconds":%d}`, command, timeout))
}

// TestPreRestartCheck: a check that passes lets each restart go on (runs
// 1 and 2 exit 1, the check runs twice, run 3 exits 0 and, the rules
// restarting every exit, the check runs again and fails: exit 0 handed
// over). Its output is logged.
func TestPreRestartCheck(t *testing.T) {
	dir, state := stateDir(t)
	check := writeFile(t, dir, "check.sh", `#!/bin/sh
n=$(cat `+dir+`/checks 2>/dev/null || echo 0); n=$((n+1)); echo $n > `+dir+`/checks
echo "check $n: gpu memory free"
[ $n -lt 3 ]
`, 0o755)
	s := start(t, checkEnv(state, `["`+check+`"]`, 10), supArgs(state, counterScript(t, dir, 1, 1, 0))...)
	if st := s.wait(15 * time.Second); st != 0 {
		t.Fatalf("exit %d, want 0", st)
	}
	if n, c := runs(t, dir), countIn(t, dir, "checks"); n != 3 || c != 3 {
		t.Errorf("%d runs and %d checks, want 3 and 3", n, c)
	}
	out := s.stderr.String()
	if strings.Count(out, `msg="pre-restart check passed"`) != 2 || !strings.Contains(out, `output="check 2: gpu memory free"`) ||
		!regexp.MustCompile(`msg="pre-restart check failed" .*reason="exit code 1" .*output="check 3: gpu memory free" outputBytes=25`).MatchString(out) {
		t.Errorf("log:\n%s", out)
	}
	if r, _ := handOverOf(t, state); r != "PreRestartCheckFailed" {
		t.Errorf("handOver.reason %q, want PreRestartCheckFailed", r)
	}
}

// TestPreRestartCheckTimesOutAndItsGroupDies: a check that hangs is killed
// at its timeout with its whole process group (a background child that
// would outlive it included), and the exit is handed over.
func TestPreRestartCheckTimesOutAndItsGroupDies(t *testing.T) {
	dir, state := stateDir(t)
	pidFile := filepath.Join(dir, "bg.pid")
	check := writeFile(t, dir, "check.sh", "#!/bin/sh\nsleep 1000 &\necho $! > "+pidFile+"\nexec sleep 1000\n", 0o755)
	s := start(t, checkEnv(state, `["`+check+`"]`, 1), supArgs(state, "sh", "-c", "exit 7")...)
	if st := s.wait(20 * time.Second); st != 7 {
		t.Fatalf("exit %d, want 7", st)
	}
	if !regexp.MustCompile(`msg="pre-restart check failed" .*reason="timed out after 1s"`).MatchString(s.stderr.String()) {
		t.Errorf("log:\n%s", s.stderr.String())
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitFor(t, "the check's background child to die", 10*time.Second, func() bool { return !aliveProcess(pid) })
}

// aliveProcess reports whether pid exists and is not a zombie.
func aliveProcess(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestPreRestartCheckFloodAndStartFailure: a check that writes 8 MB and
// fails is read to its end without blocking, and at most 4 KiB of its
// output reach the log; a check that cannot be started hands over too.
func TestPreRestartCheckFloodAndStartFailure(t *testing.T) {
	_, state := stateDir(t)
	s := start(t, checkEnv(state, `["sh","-c","head -c 8000000 /dev/zero | tr '\\0' x; exit 1"]`, 30), supArgs(state, "sh", "-c", "exit 5")...)
	if st := s.wait(30 * time.Second); st != 5 {
		t.Fatalf("exit %d, want 5", st)
	}
	out := s.stderr.String()
	if !strings.Contains(out, "outputBytes=8000000") || !strings.Contains(out, strings.Repeat("x", 4096)) || strings.Contains(out, strings.Repeat("x", 4097)) {
		t.Errorf("want 4096 bytes of the output logged and 8000000 counted; log is %d bytes", len(out))
	}
	if len(out) > 16<<10 {
		t.Errorf("log of %d bytes for one flooding check", len(out))
	}

	s = start(t, checkEnv(state, `["/nonexistent/check"]`, 5), supArgs(state, "sh", "-c", "exit 6")...)
	if st := s.wait(15 * time.Second); st != 6 {
		t.Fatalf("exit %d, want 6", st)
	}
	if !strings.Contains(s.stderr.String(), `the pre-restart check /nonexistent/check cannot be run`) {
		t.Errorf("log:\n%s", s.stderr.String())
	}
	if r, _ := handOverOf(t, state); r != "PreRestartCheckFailed" {
		t.Errorf("handOver.reason %q, want PreRestartCheckFailed", r)
	}
}

// TestStopDuringPreRestartCheck: a stop while the check runs kills the
// check and exits at once with the workload's last status.
func TestStopDuringPreRestartCheck(t *testing.T) {
	dir, state := stateDir(t)
	check := writeFile(t, dir, "check.sh", "#!/bin/sh\necho $$ > "+dir+"/check.pid\nexec sleep 1000\n", 0o755)
	s := start(t, checkEnv(state, `["`+check+`"]`, 600), supArgs(state, "sh", "-c", "exit 9")...)
	waitFor(t, "the check to run", 15*time.Second, func() bool { return countIn(t, dir, "check.pid") > 0 })
	s.signal(syscall.SIGTERM)
	if st := s.wait(10 * time.Second); st != 9 {
		t.Fatalf("exit %d, want 9", st)
	}
	if pid := countIn(t, dir, "check.pid"); aliveProcess(pid) {
		t.Errorf("the check %d outlived the supervisor", pid)
	}
}

// TestProgressStalled: the workload writes its iteration in runs 1 and 2
// and no more; with maxStalledRestarts 2, runs 3 and 4 are the two
// restarts without progress and the fourth exit is handed over.
func TestProgressStalled(t *testing.T) {
	dir, state := stateDir(t)
	progress := filepath.Join(dir, "iteration")
	w := writeFile(t, dir, "w.sh", `#!/bin/sh
n=$(cat `+dir+`/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > `+dir+`/count
[ $n -le 2 ] && echo "iteration $n" > `+progress+`
exit 1
`, 0o755)
	s := start(t, limitsEnv(state, `,"progress":{"file":"`+progress+`","maxStalledRestarts":2}`), supArgs(state, w)...)
	if st := s.wait(15 * time.Second); st != 1 {
		t.Fatalf("exit %d, want 1", st)
	}
	if n := runs(t, dir); n != 4 {
		t.Errorf("%d runs, want 4", n)
	}
	if r, _ := handOverOf(t, state); r != "ProgressStalled" {
		t.Errorf("handOver.reason %q, want ProgressStalled", r)
	}
	if !strings.Contains(s.stderr.String(), "not restarting in place: 2 in-place restarts without a change of "+progress+" (progress.maxStalledRestarts 2)") {
		t.Errorf("log:\n%s", s.stderr.String())
	}
}

// TestProgressFileIsReadAsAnAdversarys: a progress file that is a symbolic
// link (to a file the workload changes on every run) or a FIFO is refused
// and taken as absent, so it shows no progress; reading it never blocks.
func TestProgressFileIsReadAsAnAdversarys(t *testing.T) {
	for _, kind := range []string{"symlink", "fifo"} {
		t.Run(kind, func(t *testing.T) {
			dir, state := stateDir(t)
			progress := filepath.Join(dir, "iteration")
			switch kind {
			case "symlink":
				os.Symlink(filepath.Join(dir, "count"), progress)
			case "fifo":
				if err := syscall.Mkfifo(progress, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s := start(t, limitsEnv(state, `,"progress":{"file":"`+progress+`","maxStalledRestarts":2}`), supArgs(state, counterScript(t, dir, 1))...)
			if st := s.wait(15 * time.Second); st != 1 {
				t.Fatalf("exit %d, want 1", st)
			}
			if n := runs(t, dir); n != 3 {
				t.Errorf("%d runs, want 3: the refused file shows no progress", n)
			}
			if !strings.Contains(s.stderr.String(), "cannot read the progress file; taken as absent") {
				t.Errorf("log:\n%s", s.stderr.String())
			}
		})
	}
}

// TestRoundsAnotherMemberStartedAreNotCharged: b has a restart budget of
// 1. a restarts the pod three times (RestartAllContainers on 88); b is
// restarted in each round, and none of those restarts is b's to pay for:
// b's own first exit 42 is still restarted in place, its second is past
// the budget and handed over. The upstream counterpart moves every
// container's restartCount on each pod restart (kubelet_pods.go:2383-2389,
// v1.37.2); a budget here is the container's own, as restartBudget's table
// in docs/supervisor.md says.
func TestRoundsAnotherMemberStartedAreNotCharged(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	members := "RESTART_SUPERVISOR_POD_MEMBERS=a:regular,b:regular"
	cfgB := `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"0s","max":"0s"},` +
		`"restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}],"restartBudget":{"maxRestarts":1}}`
	cfgA := `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"0s","max":"0s"},` +
		`"restartPolicyRules":[{"action":"RestartAllContainers","exitCodes":{"operator":"In","values":[88]}}]}`
	count := `n=$(cat %[1]s/%[2]s.n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/%[2]s.n`
	b := start(t, podEnv(state, "b", cfgB, members), bin, "--", "sh", "-c", fmt.Sprintf(count+`
if [ $n -le 3 ]; then trap 'exit 0' TERM; while :; do sleep 0.05; done; fi
exit 42`, dir, "b"))
	a := start(t, podEnv(state, "a", cfgA, members), bin, "--", "sh", "-c", fmt.Sprintf(count+`
trap 'exit 0' TERM
if [ $n -le 3 ]; then
  while [ "$(cat %[1]s/b.n 2>/dev/null)" != "$n" ]; do sleep 0.05; done; sleep 0.3; exit 88
fi
while :; do sleep 0.05; done`, dir, "a"))
	// Past its budget b stays until the pod's other containers have ended
	// (a later pod restart would restart it too): end a, and b passes its
	// status on.
	waitFor(t, "b's hand-over", 60*time.Second, func() bool { return strings.Contains(b.stderr.String(), "reason=RestartBudgetExhausted") })
	a.signal(syscall.SIGTERM)
	a.wait(20 * time.Second)
	if got := b.wait(30 * time.Second); got != 42 {
		t.Fatalf("b's supervisor exited %d, want 42 (its second own exit, past its budget of 1)", got)
	}
	if n := countIn(t, dir, "b.n"); n != 5 {
		t.Errorf("b ran %d times, want 5: 3 pod restarts, then its own exit 42 restarted once in place, then handed over", n)
	}
	log := b.stderr.String()
	if c := strings.Count(log, "reason=RestartBudgetExhausted"); c != 1 {
		t.Errorf("%d budget hand-overs in b's log, want 1:\n%s", c, log)
	}
	d := readStatusDoc(t, state, "b")
	if l, _ := d["limits"].(map[string]any); l == nil || l["budgetRestarts"] != 1.0 {
		t.Errorf("b's limits %v, want budgetRestarts 1 (its own restart only)", d["limits"])
	}
}

// TestEscalationLadder: a's rule restarts exit 42 in place, and its ladder
// says: the first 2 of its own restarts restart a alone, the next one the
// pod (RestartAllContainers), then hand over. a exits 42 four times: two
// restarts of a alone, one pod restart (b runs a second time), and the
// fourth exit handed over (EscalationExhausted), each step in the log.
func TestEscalationLadder(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	members := "RESTART_SUPERVISOR_POD_MEMBERS=a:regular,b:regular"
	cfgA := `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"0s","max":"0s"},` +
		`"restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}],` +
		`"escalation":{"steps":[{"action":"Restart","restarts":2},{"action":"RestartAllContainers","restarts":1}]}}`
	cfgB := `{"restartPolicy":"Never","podRestartPolicy":"Never"}`
	count := `n=$(cat %[1]s/%[2]s.n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/%[2]s.n`
	b := start(t, podEnv(state, "b", cfgB, members), bin, "--", "sh", "-c", fmt.Sprintf(count+`
trap 'exit 0' TERM; while :; do sleep 0.05; done`, dir, "b"))
	a := start(t, podEnv(state, "a", cfgA, members), bin, "--", "sh", "-c", fmt.Sprintf(count+`
while [ ! -s %[1]s/b.n ]; do sleep 0.05; done; sleep 0.2; exit 42`, dir, "a"))
	waitFor(t, "a's hand-over", 60*time.Second, func() bool { return strings.Contains(a.stderr.String(), "reason=EscalationExhausted") })
	b.signal(syscall.SIGTERM)
	b.wait(20 * time.Second)
	if got := a.wait(30 * time.Second); got != 42 {
		t.Fatalf("a's supervisor exited %d, want 42 (its fourth exit, past the ladder)", got)
	}
	if na, nb := countIn(t, dir, "a.n"), countIn(t, dir, "b.n"); na != 4 || nb != 2 {
		t.Errorf("a ran %d times, b %d; want 4 and 2 (b restarted only by the ladder's pod restart)", na, nb)
	}
	log := a.stderr.String()
	for _, want := range []string{
		`escalationStep=1 escalatedTo=Restart`, `escalationStep=2 escalatedTo=RestartAllContainers`,
		`3 in-place restarts (escalation's 2 steps allow 3)`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("a's log lacks %q:\n%s", want, log)
		}
	}
	if c := strings.Count(log, "escalationStep=1 escalatedTo=Restart"); c != 2 {
		t.Errorf("%d restarts on the first step, want 2", c)
	}
}
