package supervise

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer collects the supervisor's log.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func runProbed(t *testing.T, script, config string) (Result, string) {
	t.Helper()
	o := shell(script)
	o.Config = mustParse(t, config)
	var log syncBuffer
	o.Log = slog.New(slog.NewTextHandler(&log, nil))
	r := waitResult(t, runAsync(o))
	return r, log.String()
}

func lines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// TestLivenessFailureRestartsByContainerPolicy: a workload that stops
// answering its liveness probe is stopped (SIGTERM: 143) and, as upstream
// decides on a probe failure, restarted because the container's
// restartPolicy (OnFailure) is not Never, although the pod's is Never and
// no rule matches 143. The third run exits 0, which OnFailure does not
// restart.
func TestLivenessFailureRestartsByContainerPolicy(t *testing.T) {
	dir := t.TempDir()
	script := fmt.Sprintf(`cd %s; n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
[ $n -ge 3 ] && exit 0
touch healthy; sleep 1; rm -f healthy; exec sleep 600`, dir)
	r, log := runProbed(t, script, fmt.Sprintf(`{"restartPolicy":"OnFailure","podRestartPolicy":"Never","backoff":{"initial":"100ms"},
	  "probes":{"liveness":{"exec":{"command":["test","-f","%s/healthy"]},"periodSeconds":1,"failureThreshold":2}}}`, dir))
	if r.Status != 0 || r.Restarts != 2 {
		t.Fatalf("result %+v, want status 0 after 2 restarts; log:\n%s", r, log)
	}
	if got := strings.Count(log, "liveness probe failed 2 times in a row; stopping the workload, then restarting it in place"); got != 2 {
		t.Fatalf("%d probe kills logged, want 2; log:\n%s", got, log)
	}
	if !strings.Contains(log, "exitCode=143") || !strings.Contains(log, "probe=liveness") {
		t.Fatalf("the restarts do not say they followed a liveness kill (exit 143); log:\n%s", log)
	}
}

// TestLivenessFailureWithContainerNeverGoesToRules: with the container's
// restartPolicy Never, upstream does not restart a container its probe
// killed; the exit (143) is judged by the rules, which here hand it over.
func TestLivenessFailureWithContainerNeverGoesToRules(t *testing.T) {
	r, log := runProbed(t, `exec sleep 600`, `{"restartPolicy":"Never","podRestartPolicy":"Never",
	  "probes":{"liveness":{"exec":{"command":["false"]},"periodSeconds":1,"failureThreshold":2,"terminationGracePeriodSeconds":5}}}`)
	if r.Status != 143 || r.Restarts != 0 {
		t.Fatalf("result %+v, want status 143 without restart; log:\n%s", r, log)
	}
	if !strings.Contains(log, "judging the exit by the rules") || !strings.Contains(log, "gracePeriod=5s") {
		t.Fatalf("log does not say what was done:\n%s", log)
	}
}

// TestNoProbeDuringBackoff: the workload exits 42 twice (the second
// restart waits a 3 s back-off) and then runs until two checks found it.
// Each check asks whether a workload process lives (its command line
// carries a mark, which a process has from its exec until it exits) and
// records the run it found in live-<run> or, when none lives, in
// backoff-<run>: a check recorded in backoff-1 or backoff-2 ran while no
// workload did. Nothing is timed: run 3 ends once two checks found it
// alive, however slowly the checks come, and a check during a run never
// fails (so no kill can end a run early). The one check that could still
// find no workload while its run is current is one between the workload's
// exit and the supervisor's reaping of it, which disarms the probes; runs 1
// and 2 exit at once, a second before the first check is due.
func TestNoProbeDuringBackoff(t *testing.T) {
	dir := t.TempDir()
	mark := "workload-" + filepath.Base(dir)
	script := fmt.Sprintf(`: %s; cd %s; n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
[ $n -lt 3 ] && exit 42
until [ "$(cat live-3 2>/dev/null | wc -l)" -ge 2 ]; do sleep 0.05; done; exit 0`, mark, dir)
	// The pattern does not match its own text ("workloa[d]-" is not
	// "workload-"), so the check's own shell is not taken for the workload.
	probe := fmt.Sprintf(`cd %s; n=$(cat n); if grep -qs 'workloa[d]-%s' /proc/[0-9]*/cmdline; then echo >> live-$n; exit 0; fi; echo >> backoff-$n; exit 1`,
		dir, strings.TrimPrefix(mark, "workload-"))
	r, log := runProbed(t, script, fmt.Sprintf(`{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"3s"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}],
	  "probes":{"liveness":{"exec":{"command":["sh","-c",%q]},"initialDelaySeconds":1,"periodSeconds":1,"failureThreshold":1}}}`, probe))
	if r.Status != 0 || r.Restarts != 2 {
		t.Fatalf("result %+v, want status 0 after 2 restarts; log:\n%s", r, log)
	}
	for run := 1; run <= 2; run++ {
		if n := lines(t, filepath.Join(dir, fmt.Sprintf("backoff-%d", run))); n != 0 {
			t.Errorf("%d checks ran after run %d exited (back-off); log:\n%s", n, run, log)
		}
	}
	if n := lines(t, filepath.Join(dir, "backoff-3")); n != 0 {
		t.Errorf("%d checks found no workload during run 3", n)
	}
}

// TestStartupProbeReArmedAtEveryStart: a workload that needs 2 s to start,
// restarted in place twice (exit 42). Liveness (threshold 1) fails until
// the workload is up, so only a startup probe re-armed at each start keeps
// it from being killed; the startup probe allows 6 s.
//
// "Up" is the file naming the PID of the run that is up, and the check
// asks whether that process lives: a run stops being up only by exiting,
// the same event that disarms the probes, so no check can land between
// the workload taking its "up" back and its exit (an "rm -f up" before
// "exit 42" left that window, and a loaded machine hit it).
func TestStartupProbeReArmedAtEveryStart(t *testing.T) {
	dir := t.TempDir()
	script := fmt.Sprintf(`cd %s; n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
sleep 2; echo $$ > up.new; mv up.new up; sleep 2
[ $n -lt 3 ] && exit 42
exit 0`, dir)
	check := fmt.Sprintf(`["sh","-c","test -s %[1]s/up && kill -0 \"$(cat %[1]s/up)\" 2>/dev/null"]`, dir)
	r, log := runProbed(t, script, fmt.Sprintf(`{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"1s"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}],
	  "probes":{"startup":{"exec":{"command":%[1]s},"periodSeconds":1,"failureThreshold":6},
	            "liveness":{"exec":{"command":%[1]s},"periodSeconds":1,"failureThreshold":1}}}`, check))
	if r.Status != 0 || r.Restarts != 2 {
		t.Fatalf("result %+v, want status 0 after 2 restarts; log:\n%s", r, log)
	}
	if got := strings.Count(log, "startup probe succeeded"); got != 3 {
		t.Fatalf("startup probe succeeded %d times, want once per run (3); log:\n%s", got, log)
	}
	if strings.Contains(log, "stopping the workload") {
		t.Fatalf("a probe stopped the workload; log:\n%s", log)
	}
}

// TestStartupTimeoutsStopTheWorkload: a startup probe that never succeeds
// (every check times out, which is a failure) stops the workload after
// failureThreshold checks.
func TestStartupTimeoutsStopTheWorkload(t *testing.T) {
	dir := t.TempDir()
	script := fmt.Sprintf(`cd %s; n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
[ $n -ge 2 ] && exit 3
exec sleep 600`, dir)
	r, log := runProbed(t, script, `{"restartPolicyRules":[],"podRestartPolicy":"Never","restartPolicy":"Never",
	  "probes":{"startup":{"exec":{"command":["sleep","5"]},"timeoutSeconds":1,"periodSeconds":1,"failureThreshold":2}}}`)
	// Container Never: the probe kill is judged by the rules; none, so
	// the container policy Never hands 143 over.
	if r.Status != 143 || !strings.Contains(log, "reason=\"timed out after 1s\"") {
		t.Fatalf("result %+v, want 143 after a startup kill by timeouts; log:\n%s", r, log)
	}
}

// startedPod records, at each Started, how many startup probe successes
// the supervisor had logged: one per run that really started.
type startedPod struct {
	fakePod
	log     *syncBuffer
	started chan int
}

func (p *startedPod) Started(uint64) {
	p.started <- strings.Count(p.log.String(), "startup probe succeeded")
}

// TestPodRestartStartWaitsForStartupProbe: in a pod restart, a member
// reports its start to the round (which sidecars' followers wait for)
// only once its startup probe has succeeded, as the kubelet starts the
// containers after a sidecar once the sidecar's startup probe succeeds.
func TestPodRestartStartWaitsForStartupProbe(t *testing.T) {
	dir := t.TempDir()
	o := shell(fmt.Sprintf(`cd %s; n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
sleep 2; touch up-$n; exec sleep 600`, dir))
	o.Config = mustParse(t, fmt.Sprintf(`{"backoff":{"initial":"0s"},
	  "probes":{"startup":{"exec":{"command":["sh","-c","cd %s && test -f up-$(cat n)"]},"periodSeconds":1,"failureThreshold":30}}}`, dir))
	var log syncBuffer
	o.Log = slog.New(slog.NewTextHandler(&log, nil))
	pod := &startedPod{fakePod: fakePod{gens: make(chan uint64)}, log: &log, started: make(chan int, 4)}
	o.Pod = pod
	done := runAsync(o)
	defer func() {
		p, _ := os.FindProcess(os.Getpid())
		p.Signal(os.Interrupt)
		waitResult(t, done)
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s; log:\n%s", what, log.String())
			}
		}
	}
	waitFor("first startup", func() bool { return strings.Contains(log.String(), "startup probe succeeded") })
	pod.gens <- 1
	select {
	case n := <-pod.started:
		if n != 2 {
			t.Fatalf("the round heard of the start before the workload's startup probe succeeded; log:\n%s", log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the round never heard of the start; log:\n%s", log.String())
	}
}

// TestProbeKillBackoffFromThePreviousExit: the kubelet kills and restarts
// a container its liveness probe failed in one sync, and doBackOff asks
// about the instance that exited before (kuberuntime_manager.go:2080-2107,
// v1.37.2): the first kill has none before it (no back-off, no step), the
// second waits Delay(0) = 0, and the third finds the second's exit less
// than Delay(1) = 8 s ago (the third run lasted a second or two), so its
// start is refused and comes a full 8 s after the kill, measured from the
// killed instance's own exit. (The step less the time since the previous
// exit, as this supervisor once waited, gave 6-7 s.) Each run lasts until
// the probe's first check; the fourth exits 0 before it.
func TestProbeKillBackoffFromThePreviousExit(t *testing.T) {
	dir := t.TempDir()
	script := fmt.Sprintf(`cd %s; n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
[ $n -ge 4 ] && exit 0
exec sleep 600`, dir)
	r, log := runProbed(t, script, `{"restartPolicy":"OnFailure","podRestartPolicy":"Never","backoff":{"initial":"8s","max":"60s"},
	  "probes":{"liveness":{"exec":{"command":["false"]},"initialDelaySeconds":1,"periodSeconds":1,"failureThreshold":1}}}`)
	if r.Status != 0 || r.Restarts != 3 {
		t.Fatalf("result %+v, want status 0 after 3 restarts; log:\n%s", r, log)
	}
	var delays []time.Duration
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, "restarting in place") || !strings.Contains(l, "probe=liveness") {
			continue
		}
		i := strings.Index(l, "delay=")
		d, err := time.ParseDuration(strings.Fields(l[i+len("delay="):])[0])
		if err != nil {
			t.Fatal(err)
		}
		delays = append(delays, d)
	}
	if len(delays) != 3 || delays[0] != 0 || delays[1] != 0 || delays[2] != 8*time.Second {
		t.Fatalf("delays after the probe kills %v, want 0, 0, 8s; log:\n%s", delays, log)
	}
}

// TestFirstProbeCheckWaitsForTheKubeletToSeeTheRun: with
// initialDelaySeconds 0 the kubelet's first check of a container comes at
// a tick of its worker once the container is in the status cache, which
// the PLEG's relist fills at the earliest a second after the start
// (worker.go:221-242 and :331, kubelet.go:215, v1.37.2); never at the
// start itself. A liveness probe that always fails with failureThreshold
// 1 must let each run live at least that second, the run after an
// in-place restart too; the ticks keep the first run's phase.
func TestFirstProbeCheckWaitsForTheKubeletToSeeTheRun(t *testing.T) {
	dir := t.TempDir()
	script := fmt.Sprintf(`cd %s; n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
[ $n -ge 3 ] && exit 0
exec sleep 600`, dir)
	r, log := runProbed(t, script, `{"restartPolicy":"OnFailure","podRestartPolicy":"Never","backoff":{"initial":"100ms"},
	  "probes":{"liveness":{"exec":{"command":["false"]},"periodSeconds":1,"failureThreshold":1}}}`)
	if r.Status != 0 || r.Restarts != 2 {
		t.Fatalf("result %+v, want status 0 after 2 restarts; log:\n%s", r, log)
	}
	var ran []time.Duration
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, "exitCode=143") {
			continue
		}
		i := strings.Index(l, "ranFor=")
		d, err := time.ParseDuration(strings.Fields(l[i+len("ranFor="):])[0])
		if err != nil {
			t.Fatal(err)
		}
		ran = append(ran, d)
	}
	if len(ran) != 2 {
		t.Fatalf("%d probe kills, want 2; log:\n%s", len(ran), log)
	}
	for i, d := range ran {
		if d < probeSeenAfter {
			t.Errorf("run %d killed by its first check %s after its start, want at least %s; log:\n%s", i+1, d, probeSeenAfter, log)
		}
	}
}
