package supervise

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

func waitResult(t *testing.T, ch <-chan Result) Result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
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

func TestRestartRequests(t *testing.T) {
	dir := t.TempDir()
	// Run 1 waits for SIGTERM (the request); run 2 exits 0, which the
	// container policy Never under pod Always turns into a hold; a request
	// during the hold starts run 3, which holds again.
	o := shell(fmt.Sprintf(`
n=$(cat %[1]s/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/n
case $n in
1) trap 'exit 143' TERM; echo > %[1]s/ready; while :; do sleep 0.02; done ;;
esac
exit 0`, dir))
	o.Config = mustParse(t, `{"restartPolicy":"Never","podRestartPolicy":"Always"}`)
	reqs := make(chan RestartRequest)
	o.RestartRequests = reqs
	if testing.Verbose() {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
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

	waitPhase := func(p Phase, restarts int) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case s := <-states:
				if s.Phase == p && s.Restarts == restarts {
					return
				}
			case <-deadline:
				t.Fatalf("no state %s with %d restarts", p, restarts)
			}
		}
	}
	waitPhase(Running, 0)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("workload not ready")
		}
	}
	reqs <- RestartRequest{Reason: "test: running"}
	// The restarted run exits 0: container Never under pod Always holds.
	waitPhase(Holding, 1)
	reqs <- RestartRequest{Reason: "test: holding"}
	waitPhase(Holding, 2)
	if b, _ := os.ReadFile(filepath.Join(dir, "n")); strings.TrimSpace(string(b)) != "3" {
		t.Fatalf("workload ran %s times, want 3", b)
	}
	// A stop now ends supervision with the last status.
	p, _ := os.FindProcess(os.Getpid())
	p.Signal(os.Interrupt)
	r := waitResult(t, done)
	result = &r
	if r.Status != 0 || r.Restarts != 2 {
		t.Fatalf("result %+v, want status 0 after 2 restarts", r)
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

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]int{"SIGTERM": 15, "term": 15, "Sigquit": 3, "9": 9, "64": 64} {
		if s, ok := ParseSignal(in); !ok || int(s) != want {
			t.Errorf("%s: %d %v, want %d", in, s, ok, want)
		}
	}
	for _, in := range []string{"", "0", "65", "SIGNOPE", "99999999999"} {
		if _, ok := ParseSignal(in); ok {
			t.Errorf("%q accepted", in)
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
