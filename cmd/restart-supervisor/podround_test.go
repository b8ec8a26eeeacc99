package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// podRoundBackoff is every member's back-off in the round tests: a step of
// it anywhere between two pod restarts outlasts every wait of the tests,
// so a member that waited one would never start in time.
const podRoundBackoff = `"backoff":{"initial":"30m","max":"30m","resetAfter":"2s"}`

// roundScript is a member's workload: it counts its runs, appends
// "start NAME RUN" to the events file and, on SIGTERM, "stop NAME RUN";
// then it runs body.
func roundScript(t *testing.T, dir, ev, name, body string) string {
	return writeFile(t, dir, name+".sh", fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/%[2]s.n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/%[2]s.n
echo "start %[2]s $n" >> %[3]s
trap 'echo "stop %[2]s $n" >> %[3]s; exit 0' TERM
%[4]s
`, dir, name, ev, body), 0o755)
}

// eventIndex returns the line number of each line of the events file.
func eventIndex(t *testing.T, ev string) (map[string]int, string) {
	t.Helper()
	data, _ := os.ReadFile(ev)
	at := map[string]int{}
	for i, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		at[l] = i
	}
	return at, string(data)
}

// TestPodRestartRoundStartsTogether: upstream every container of a pod
// restart is removed and the next sync starts them all, with no back-off
// (the removed containers leave doBackOff no exited status to measure
// from: kuberuntime_manager.go, k8s.io/kubernetes v1.37.2). Source a
// restarts the pod (exit 88), then restarts alone (exit 1, Restart), then
// restarts the pod again. The followers b and c ran past resetAfter since
// the first pod restart, a did not since its own restart; a pod restart
// back-off measured from each member's own last start, as before, kept a
// waiting 30 minutes while b and c ran the second round alone. Every
// member must start the second round, each after every member stopped the
// first, and no member may log a back-off for it.
func TestPodRestartRoundStartsTogether(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	ev := filepath.Join(dir, "events")
	members := "RESTART_SUPERVISOR_POD_MEMBERS=a:regular,b:regular,c:regular"
	wait := `while :; do sleep 0.02; done`
	follower := "{" + podRoundBackoff + "}"
	b := start(t, podEnv(state, "b", follower, members), bin, "--", roundScript(t, dir, ev, "b", wait))
	c := start(t, podEnv(state, "c", follower, members), bin, "--", roundScript(t, dir, ev, "c", wait))
	source := `{"restartPolicy":"Never","podRestartPolicy":"Never",` + podRoundBackoff + `,"restartPolicyRules":[` +
		`{"action":"Restart","exitCodes":{"operator":"In","values":[1]}},` +
		`{"action":"RestartAllContainers","exitCodes":{"operator":"In","values":[88]}}]}`
	a := start(t, podEnv(state, "a", source, members), bin, "--", roundScript(t, dir, ev, "a", fmt.Sprintf(`
case $n in 1|3) code=88;; 2) code=1;; *) %[3]s;; esac
while [ ! -e %[1]s/go$n ]; do sleep 0.02; done; echo "stop a $n" >> %[2]s; exit $code`, dir, ev, wait)))
	runs := func(want map[string]int) func() bool {
		return func() bool {
			for name, n := range want {
				if countIn(t, dir, name+".n") != n {
					return false
				}
			}
			return true
		}
	}
	waitFor(t, "the first runs", 15*time.Second, runs(map[string]int{"a": 1, "b": 1, "c": 1}))
	os.WriteFile(filepath.Join(dir, "go1"), nil, 0o644)
	waitFor(t, "the first pod restart", 20*time.Second, runs(map[string]int{"a": 2, "b": 2, "c": 2}))
	// b and c now run past resetAfter; a's own restart then comes after
	// that, so that a back-off taken from each member's last start would
	// be reset for b and c and a step for a.
	time.Sleep(2500 * time.Millisecond)
	os.WriteFile(filepath.Join(dir, "go2"), nil, 0o644)
	waitFor(t, "a's restart alone", 20*time.Second, runs(map[string]int{"a": 3, "b": 2, "c": 2}))
	os.WriteFile(filepath.Join(dir, "go3"), nil, 0o644)
	waitFor(t, "every member in the second pod restart", 30*time.Second, runs(map[string]int{"a": 4, "b": 3, "c": 3}))
	// A run counts itself before it logs its start: wait for the lines.
	waitFor(t, "the second pod restart's start lines", 10*time.Second, func() bool {
		at, _ := eventIndex(t, ev)
		_, a4 := at["start a 4"]
		_, b3 := at["start b 3"]
		_, c3 := at["start c 3"]
		return a4 && b3 && c3
	})

	at, data := eventIndex(t, ev)
	stops := []string{"stop a 3", "stop b 2", "stop c 2"}
	for _, st := range []string{"start a 4", "start b 3", "start c 3"} {
		for _, sp := range stops {
			i, ok1 := at[sp]
			j, ok2 := at[st]
			if !ok1 || !ok2 || i > j {
				t.Errorf("want %q before %q:\n%s", sp, st, data)
			}
		}
	}
	first, last := startedAt(t, a, 4), startedAt(t, a, 4)
	for _, s := range []struct {
		s   *sup
		run int
	}{{b, 3}, {c, 3}} {
		at := startedAt(t, s.s, s.run)
		first, last = minTime(first, at), maxTime(last, at)
	}
	t.Logf("the second pod restart's starts spread over %s", last.Sub(first))
	for name, s := range map[string]*sup{"a": a, "b": b, "c": c} {
		if strings.Contains(s.stderr.String(), `msg="pod restart back-off"`) {
			t.Errorf("%s waited a back-off between pod restarts:\n%s", name, s.stderr.String())
		}
	}
	for _, s := range []*sup{a, b, c} {
		s.signal(syscall.SIGTERM)
		s.wait(10 * time.Second)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
