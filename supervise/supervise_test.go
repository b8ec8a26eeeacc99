package supervise

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// These tests call Run in the test process with real child processes. Run
// owns wait4(-1) while it runs, so no test here may start other children
// at the same time (no t.Parallel, no os/exec).

func shell(script string) Options {
	return Options{Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Env: os.Environ(), GracePeriod: 5 * time.Second}
}

func mustParse(t *testing.T, doc string) rules.Config {
	t.Helper()
	c, err := rules.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func runAsync(o Options) <-chan Result {
	ch := make(chan Result, 1)
	go func() { ch <- Run(o) }()
	return ch
}

// waitResult waits for Run. The bound is generous: the exit-storm test's
// 20 runs of 100 forks each take 30 s on a loaded 2-core machine, and a Run
// left behind by a timed-out test would steal the next test's children.
func waitResult(t *testing.T, ch <-chan Result) Result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(3 * time.Minute):
		t.Fatal("Run did not return")
		return Result{}
	}
}

// TestStatusNeverLostInExitStorm: every run leaves 100 children that exit
// together with the workload, so SIGCHLDs coalesce and wait4 returns many
// pids per drain. Losing the workload's status even once would stall the
// restart chain, so 20 runs and the final status prove none was lost.
func TestStatusNeverLostInExitStorm(t *testing.T) {
	dir := t.TempDir()
	o := shell(fmt.Sprintf(`
n=$(cat %[1]s/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/n
i=0; while [ $i -lt 100 ]; do true & i=$((i+1)); done
[ $n -lt 20 ] && exit 42
exit 7`, dir))
	o.Config = mustParse(t, `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"0s"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`)
	r := waitResult(t, runAsync(o))
	if r.Status != 7 || r.Restarts != 19 {
		t.Fatalf("result %+v, want status 7 after 19 restarts", r)
	}
}

// fakePod is a PodRestarter in one process: generations come from the
// test, Accept takes each newer one once, Announce records its codes.
type fakePod struct {
	gens      chan uint64
	current   uint64
	announced []int32
	// started and failed record Started and Failed; initFailed is what
	// InitFailed answers per generation.
	started, failed []uint64
	initFailed      map[uint64]int
	// othersEnded, when set, is what OthersEnded returns.
	othersEnded chan struct{}
}

func (f *fakePod) Announce(code int32) (uint64, error) {
	f.announced = append(f.announced, code)
	f.current++
	return f.current, nil
}
func (f *fakePod) Stopped(uint64) (<-chan struct{}, func()) {
	c := make(chan struct{})
	close(c)
	return c, func() {}
}
func (f *fakePod) Started(g uint64)       { f.started = append(f.started, g) }
func (f *fakePod) Failed(g uint64, _ int) { f.failed = append(f.failed, g) }
func (f *fakePod) OthersEnded(rules.RestartPolicy) (<-chan struct{}, func()) {
	if f.othersEnded == nil {
		return nil, nil
	}
	return f.othersEnded, func() {}
}
func (f *fakePod) InitFailed(g uint64) (int, bool) {
	code, ok := f.initFailed[g]
	return code, ok
}
func (f *fakePod) Pending() <-chan uint64 { return f.gens }
func (f *fakePod) Accept(g uint64) bool {
	if g <= f.current {
		return false
	}
	f.current = g
	return true
}

func TestPodRestarts(t *testing.T) {
	dir := t.TempDir()
	// Run 1 ignores SIGTERM and waits: only the pod restart's SIGKILL,
	// after the grace period, ends it. Run 2 exits 88, whose rule says
	// RestartAllContainers: it is announced and restarted with no
	// back-off, as upstream. Run 3 exits 0: container Never
	// under pod Always holds. A pod restart during the hold starts run 4,
	// which holds again.
	o := shell(fmt.Sprintf(`
n=$(cat %[1]s/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/n
case $n in
1) trap '' TERM; echo > %[1]s/ready; while :; do sleep 0.02; done ;;
2) exit 88 ;;
esac
exit 0`, dir))
	o.Config = mustParse(t, `{"restartPolicy":"Never","podRestartPolicy":"Always","backoff":{"initial":"100ms"},
	  "restartPolicyRules":[{"action":"RestartAllContainers","exitCodes":{"operator":"In","values":[88]}}]}`)
	if testing.Verbose() {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	pod := &fakePod{gens: make(chan uint64)}
	o.Pod = pod
	states := make(chan State, 100)
	o.OnChange = func(s State) { states <- s }
	done := runAsync(o)
	var result *Result
	t.Cleanup(func() {
		if result == nil {
			p, _ := os.FindProcess(os.Getpid())
			p.Signal(os.Interrupt)
			<-done
		}
	})

	waitPhase := func(p contract.Phase, restarts int) State { t.Helper(); return waitForState(t, states, p, restarts) }
	waitPhase(contract.PhaseRunning, 0)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("workload not ready")
		}
	}
	pod.gens <- 1
	st := waitPhase(contract.PhaseHolding, 2)
	if st.PodRestarts != 2 || st.LastRestart == nil || st.LastRestart.Code != 88 || st.LastRestart.Action != rules.ActionRestartAllContainers {
		t.Fatalf("state %+v: want 2 pod restarts, the last caused by exit 88", st)
	}
	if len(pod.announced) != 1 || pod.announced[0] != 88 {
		t.Fatalf("announced %v, want [88]", pod.announced)
	}
	// Generation 2 was the announcement itself: not accepted again.
	pod.gens <- 2
	pod.gens <- 3
	waitPhase(contract.PhaseHolding, 3)
	if b, _ := os.ReadFile(filepath.Join(dir, "n")); strings.TrimSpace(string(b)) != "4" {
		t.Fatalf("workload ran %s times, want 4", b)
	}
	p, _ := os.FindProcess(os.Getpid())
	p.Signal(os.Interrupt)
	r := waitResult(t, done)
	result = &r
	if r.Status != 0 || r.Restarts != 3 {
		t.Fatalf("result %+v, want status 0 after 3 restarts", r)
	}
}

func TestStartErrorStatus(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte("x"), 0o644)
	for path, want := range map[string]int{filepath.Join(dir, "missing"): 127, plain: 126, dir: 126} {
		r := Run(Options{Path: path, Argv: []string{path}, GracePeriod: time.Second})
		if r.Status != want || r.StartErr == nil || !strings.HasPrefix(r.StartErr.Error(), path+": ") {
			t.Errorf("%s: %+v, want status %d and an error naming the command", path, r, want)
		}
	}
}

func TestSIGURGIsNeverForwarded(t *testing.T) {
	for _, s := range append(append([]os.Signal{}, forwardedSignals...), caughtSignals...) {
		if s.String() == "urgent I/O condition" {
			t.Fatal("SIGURG is in the signal lists; the Go runtime uses it for preemption")
		}
	}
}

func parseForBench(doc string) (rules.Config, error) { return rules.Parse([]byte(doc)) }

// TestNothingOfARunSurvivesItsRestart: every run starts a helper that
// leaves the workload's process group and session (setsid) and another
// that double-forks, then exits 42. Each run checks that the helpers of
// the runs before it are gone, as they would be in a new container; the
// last run exits 0 and nothing may outlive the supervisor either.
func TestNothingOfARunSurvivesItsRestart(t *testing.T) {
	dir := t.TempDir()
	o := shell(fmt.Sprintf(`
n=$(cat %[1]s/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/n
for f in %[1]s/helper.*; do
	[ -e "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && echo "run $n: $f alive" >> %[1]s/survivors
done
setsid sh -c 'echo $$ > %[1]s/helper.setsid.'$n'; exec sleep 100' &
(sh -c 'echo $$ > %[1]s/helper.double.'$n'; exec sleep 100' &) 
while [ ! -s %[1]s/helper.setsid.$n ] || [ ! -s %[1]s/helper.double.$n ]; do sleep 0.01; done
[ $n -le 3 ] && exit 42
exit 0`, dir))
	o.Config = mustParse(t, `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"0s"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`)
	r := waitResult(t, runAsync(o))
	if r.Status != 0 || r.Restarts != 3 {
		t.Fatalf("result %+v, want status 0 after 3 restarts", r)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "survivors")); err == nil {
		t.Fatalf("processes of earlier runs were still running:\n%s", b)
	}
	helpers, _ := filepath.Glob(filepath.Join(dir, "helper.*"))
	if len(helpers) != 8 {
		t.Fatalf("%d helpers recorded, want 8", len(helpers))
	}
	for _, f := range helpers {
		b, _ := os.ReadFile(f)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if pid > 0 && syscall.Kill(pid, 0) == nil {
			t.Errorf("%s (pid %d) outlived the supervisor", filepath.Base(f), pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestInitRerun: the re-run of an init container runs nothing at first,
// runs its command once per pod restart, reports the round's start only
// when the run initialized the container (exit 0), and a failure for good
// (exit 3 in a Never pod) as Failed; it idles in between.
func TestInitRerun(t *testing.T) {
	dir := t.TempDir()
	o := shell(fmt.Sprintf(`
n=$(cat %[1]s/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/n
[ $n -eq 2 ] && exit 3
exit 0`, dir))
	o.Config = mustParse(t, `{"restartPolicy":"Never","podRestartPolicy":"Never","initContainer":true,"backoff":{"initial":"10ms"}}`)
	o.InitRerun = true
	pod := &fakePod{gens: make(chan uint64)}
	o.Pod = pod
	states := make(chan State, 100)
	o.OnChange = func(s State) { states <- s }
	done := runAsync(o)
	finished := false
	t.Cleanup(func() {
		if !finished {
			p, _ := os.FindProcess(os.Getpid())
			p.Signal(os.Interrupt)
			<-done
		}
	})
	waitPhase := func(p contract.Phase, restarts int) State { t.Helper(); return waitForState(t, states, p, restarts) }
	if st := waitPhase(contract.PhaseInitialized, 0); !st.Started || st.PID != 0 {
		t.Fatalf("first state %+v: want started, no workload", st)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(dir, "n")); err == nil {
		t.Fatal("the workload ran before any pod restart")
	}
	pod.gens <- 1
	waitPhase(contract.PhaseInitialized, 1)
	if !reflect.DeepEqual(pod.started, []uint64{1}) || len(pod.failed) != 0 {
		t.Fatalf("after the first re-run: started %v, failed %v; want [1], []", pod.started, pod.failed)
	}
	pod.gens <- 2
	if st := waitPhase(contract.PhaseHolding, 2); st.Started || st.LastExit == nil || st.LastExit.Code != 3 {
		t.Fatalf("after the failed re-run: %+v; want held, not started, last exit 3", st)
	}
	if !reflect.DeepEqual(pod.started, []uint64{1}) || !reflect.DeepEqual(pod.failed, []uint64{2}) {
		t.Fatalf("after the failed re-run: started %v, failed %v; want [1], [2]", pod.started, pod.failed)
	}
	pod.gens <- 3
	waitPhase(contract.PhaseInitialized, 3)
	if !reflect.DeepEqual(pod.started, []uint64{1, 3}) {
		t.Fatalf("started %v, want [1 3]", pod.started)
	}
	p, _ := os.FindProcess(os.Getpid())
	p.Signal(os.Interrupt)
	r := waitResult(t, done)
	finished = true
	if r.Status != 0 || r.Restarts != 3 {
		t.Fatalf("result %+v, want status 0 after 3 re-runs", r)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "n")); strings.TrimSpace(string(b)) != "3" {
		t.Fatalf("workload ran %s times, want 3", b)
	}
}

// TestInitFailedEndsTheMember: a member whose pod restart finds an init
// container's re-run failed ends with that exit code instead of starting,
// as the containers after a failed init container never run upstream.
func TestInitFailedEndsTheMember(t *testing.T) {
	dir := t.TempDir()
	o := shell(fmt.Sprintf(`
n=$(cat %[1]s/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/n
exec sleep 100`, dir))
	o.Config = mustParse(t, `{"restartPolicy":"Never","podRestartPolicy":"Never"}`)
	pod := &fakePod{gens: make(chan uint64), initFailed: map[uint64]int{1: 5}}
	o.Pod = pod
	done := runAsync(o)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile(filepath.Join(dir, "n")); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("workload not started")
		}
	}
	pod.gens <- 1
	r := waitResult(t, done)
	if r.Status != 5 {
		t.Fatalf("result %+v, want status 5, the failed re-run's", r)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "n")); strings.TrimSpace(string(b)) != "1" {
		t.Fatalf("workload ran %s times, want 1", b)
	}
}

// TestEndedWaitsForTheOthers: in a pod whose other regular containers
// still run, a final exit keeps the container (phase Ended) so that a pod
// restart restarts it, as upstream restarts ended containers too; once the
// others have ended, the supervisor exits with the last status.
func TestEndedWaitsForTheOthers(t *testing.T) {
	dir := t.TempDir()
	o := shell(fmt.Sprintf(`
n=$(cat %[1]s/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/n
exit $((n+4))`, dir))
	o.Config = mustParse(t, `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"10ms"}}`)
	pod := &fakePod{gens: make(chan uint64), othersEnded: make(chan struct{})}
	o.Pod = pod
	states := make(chan State, 100)
	o.OnChange = func(s State) { states <- s }
	done := runAsync(o)
	waitPhase := func(p contract.Phase, restarts int) State { t.Helper(); return waitForState(t, states, p, restarts) }
	if st := waitPhase(contract.PhaseEnded, 0); st.LastExit == nil || st.LastExit.Code != 5 {
		t.Fatalf("state %+v, want ended after exit 5", st)
	}
	pod.gens <- 1
	if st := waitPhase(contract.PhaseEnded, 1); st.LastExit == nil || st.LastExit.Code != 6 || st.PodRestarts != 1 {
		t.Fatalf("state %+v, want ended again after a pod restart and exit 6", st)
	}
	close(pod.othersEnded)
	r := waitResult(t, done)
	if r.Status != 6 || r.Restarts != 1 {
		t.Fatalf("result %+v, want status 6 after 1 restart", r)
	}
}

// waitForState reads states until one is in phase p after the given
// number of restarts, and returns it; it fails the test after 20 s.
func waitForState(t *testing.T, states <-chan State, p contract.Phase, restarts int) State {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case s := <-states:
			if s.Phase == p && s.Restarts == restarts {
				return s
			}
		case <-deadline:
			t.Fatalf("no state %s with %d restarts", p, restarts)
		}
	}
}
