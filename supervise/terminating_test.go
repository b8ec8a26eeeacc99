package supervise

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// testTerminatingSignal is what restart-probe prestop sends in a pod
// (contract.SignalTerminating); any signal the supervisor neither forwards
// nor takes as a stop does for the loop.
const testTerminatingSignal = syscall.Signal(44)

func signalSelf(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(os.Getpid(), sig); err != nil {
		t.Fatal(err)
	}
}

// TestTerminatingRunIsNotRestarted: once the kubelet has begun to stop the
// container (the preStop hook's signal), a workload that then exits with a
// code the rules restart (as `nginx -s quit` in a preStop makes nginx exit)
// ends the container with that code, as upstream restarts no container of
// a pod marked for deletion. The same rules restart it before the signal.
func TestTerminatingRunIsNotRestarted(t *testing.T) {
	dir := t.TempDir()
	// Each run counts itself, then waits for the file "quit" (the
	// preStop's doing) and exits 42.
	o := shell(fmt.Sprintf(`
n=$(cat %[1]s/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/n
[ $n -eq 1 ] && exit 42
while [ ! -e %[1]s/quit ]; do sleep 0.01; done
exit 42`, dir))
	o.Config = mustParse(t, `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"0s"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`)
	o.TerminatingSignal = testTerminatingSignal
	states := make(chan State, 100)
	o.OnChange = func(s State) { states <- s }
	done := runAsync(o)
	waitForState(t, states, contract.PhaseRunning, 1)
	signalSelf(t, testTerminatingSignal)
	for st := waitForState(t, states, contract.PhaseRunning, 1); !st.Terminating; st = waitForState(t, states, contract.PhaseRunning, 1) {
	}
	if err := os.WriteFile(filepath.Join(dir, "quit"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := waitResult(t, done)
	if r.Status != 42 || r.Restarts != 1 {
		t.Fatalf("result %+v, want status 42 after the 1 restart before the preStop", r)
	}
	if n, _ := os.ReadFile(filepath.Join(dir, "n")); strings.TrimSpace(string(n)) != "2" {
		t.Fatalf("%s runs, want 2", n)
	}
}

// TestTerminatingInBackoffExitsAtOnce: in a back-off there is no
// container natively, so nothing to stop: the supervisor exits with the
// last run's status at once instead of waiting out the back-off and
// starting a run the kubelet would never start.
func TestTerminatingInBackoffExitsAtOnce(t *testing.T) {
	dir := t.TempDir()
	o := shell(fmt.Sprintf(`echo run >> %s/runs; exit 42`, dir))
	o.Config = mustParse(t, `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"1h","max":"1h"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`)
	o.TerminatingSignal = testTerminatingSignal
	states := make(chan State, 100)
	o.OnChange = func(s State) { states <- s }
	done := runAsync(o)
	// The first restart is at once (the kubelet's first step is 0), the
	// next waits an hour.
	for st := <-states; st.Phase != contract.PhaseBackingOff || time.Until(st.NextStartAt) < time.Minute; st = <-states {
	}
	before, _ := os.ReadFile(filepath.Join(dir, "runs"))
	signalSelf(t, testTerminatingSignal)
	select {
	case r := <-done:
		if r.Status != 42 {
			t.Fatalf("result %+v, want status 42", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the supervisor waits out its back-off after the preStop's signal")
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "runs")); string(after) != string(before) {
		t.Fatalf("runs %q after the signal, %q before: the workload was started again", after, before)
	}
}

// TestTerminatingStopsLiveness: upstream stops a deleted pod's liveness
// probe (prober/worker.go doProbe); a workload that stops answering while
// it drains is not killed by the probe and exits on its own.
func TestTerminatingStopsLiveness(t *testing.T) {
	dir := t.TempDir()
	healthy := filepath.Join(dir, "healthy")
	if err := os.WriteFile(healthy, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	o := shell(fmt.Sprintf(`
while [ ! -e %[1]s/quit ]; do sleep 0.01; done
exit 5`, dir))
	o.Config = mustParse(t, fmt.Sprintf(`{"restartPolicy":"Always","podRestartPolicy":"Always","backoff":{"initial":"0s"},
	  "probes":{"liveness":{"exec":{"command":["test","-e",%q]},"periodSeconds":1,"failureThreshold":1,"timeoutSeconds":1}}}`, healthy))
	o.TerminatingSignal = testTerminatingSignal
	states := make(chan State, 100)
	o.OnChange = func(s State) { states <- s }
	done := runAsync(o)
	waitForState(t, states, contract.PhaseRunning, 0)
	signalSelf(t, testTerminatingSignal)
	for st := waitForState(t, states, contract.PhaseRunning, 0); !st.Terminating; st = waitForState(t, states, contract.PhaseRunning, 0) {
	}
	if err := os.Remove(healthy); err != nil {
		t.Fatal(err)
	}
	// Three probe periods with the check failing: a live probe would have
	// killed the workload (exit 137 or 143, not 5).
	time.Sleep(3500 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(dir, "quit"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := waitResult(t, done); r.Status != 5 || r.Restarts != 0 {
		t.Fatalf("result %+v, want status 5 with no restart", r)
	}
}
