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

// TestRestartAllContainersAcrossSupervisors runs two supervisors sharing a
// state directory, as two containers of one pod do: container a's exit 88
// matches a RestartAllContainers rule, and container b's workload is
// restarted once because of it.
func TestRestartAllContainersAcrossSupervisors(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	script := func(name string, firstExit string) string {
		return writeFile(t, dir, name+".sh", fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/%[2]s.n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/%[2]s.n
[ $n = 1 ] && { %[3]s; }
echo ready > %[1]s/%[2]s.ready.$n
exec sleep 60
`, dir, name, firstExit), 0o755)
	}
	env := func(name string) []string {
		return []string{"RESTART_SUPERVISOR_STATE_DIR=" + state, "RESTART_SUPERVISOR_CONTAINER_NAME=" + name,
			`RESTART_SUPERVISOR_CONFIG={"restartPolicy":"Never","podRestartPolicy":"Never","restartPolicyRules":[{"action":"RestartAllContainers","exitCodes":{"operator":"In","values":[88]}}]}`}
	}
	ready := func(name string, run int) {
		waitFor(t, fmt.Sprintf("%s run %d", name, run), 15*time.Second, func() bool {
			_, err := os.Stat(filepath.Join(dir, fmt.Sprintf("%s.ready.%d", name, run)))
			return err == nil
		})
	}
	b := start(t, env("b"), bin, "--", script("b", "true"))
	ready("b", 1)
	a := start(t, env("a"), bin, "--", script("a", "exit 88"))
	ready("a", 2)
	ready("b", 2)
	time.Sleep(300 * time.Millisecond) // a second restart of b would show up here
	for name, want := range map[string]string{"a": "2", "b": "2"} {
		got, _ := os.ReadFile(filepath.Join(dir, name+".n"))
		if strings.TrimSpace(string(got)) != want {
			t.Errorf("container %s ran %s times, want %s", name, got, want)
		}
	}
	for _, s := range []*sup{a, b} {
		s.signal(syscall.SIGTERM)
		if st := s.wait(10 * time.Second); st != 143 {
			t.Errorf("exit status %d, want 143", st)
		}
	}
	if !strings.Contains(b.stderr.String(), "pod restart; killing the workload") {
		t.Errorf("b's log lacks the pod restart")
	}
	doc, _ := os.ReadFile(filepath.Join(state, "status", "b.json"))
	if !strings.Contains(string(doc), `"podRestarts":1`) || !strings.Contains(string(doc), `"podRestart":1`) {
		t.Errorf("b's status document lacks podRestarts 1 or the pod restart that killed its last run: %s", doc)
	}
}

// TestConfigFileIsReloaded: a rule added to the --config file while the
// workload runs decides its next exit.
func TestConfigFileIsReloaded(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "cfg.yaml", "restartPolicy: Never\npodRestartPolicy: Never\n", 0o644)
	w := writeFile(t, dir, "w.sh", fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/n
[ $n = 1 ] && { while [ ! -e %[1]s/go ]; do sleep 0.02; done; exit 42; }
exit 0
`, dir), 0o755)
	s := start(t, nil, bin, "--config", cfg, "--", w)
	s.waitLog("workload started", 10*time.Second)
	if err := os.WriteFile(cfg+".new", []byte(restart42), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Rename(cfg+".new", cfg)
	s.waitLog("configuration reloaded", 10*time.Second)
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	if st := s.wait(10 * time.Second); st != 0 {
		t.Fatalf("exit status %d, want 0 (42 restarted by the reloaded rule)", st)
	}
	if n := countIn(t, dir, "n"); n != 2 {
		t.Fatalf("workload ran %d times, want 2", n)
	}
}

// TestPodRestartSourceFollowsBackoff: a workload that hits its
// RestartAllContainers rule on every start restarts the other containers
// each time, but its own restarts follow its backoff, so the pod restarts
// are spaced out instead of looping. Runs are counted from the
// supervisors' own "workload started" lines: a run killed a few
// milliseconds after its start may not get to record itself.
func TestPodRestartSourceFollowsBackoff(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	env := func(name string) []string {
		return []string{"RESTART_SUPERVISOR_STATE_DIR=" + state, "RESTART_SUPERVISOR_CONTAINER_NAME=" + name,
			`RESTART_SUPERVISOR_CONFIG={"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"30m","max":"30m"},"restartPolicyRules":[{"action":"RestartAllContainers","exitCodes":{"operator":"In","values":[88]}}]}`}
	}
	starts := func(s *sup) int { return strings.Count(s.stderr.String(), `msg="workload started"`) }
	b := start(t, env("b"), bin, "--", "sleep", "60")
	waitFor(t, "b started", 15*time.Second, func() bool { return starts(b) == 1 })
	a := start(t, env("a"), bin, "--", "sh", "-c", "exit 88")
	// Run 1 exits 88: immediate restart. Run 2 exits 88: a waits 30
	// minutes, while b has been restarted once per pod restart.
	waitFor(t, "a in backoff", 15*time.Second, func() bool {
		doc, _ := os.ReadFile(filepath.Join(state, "status", "a.json"))
		return strings.Contains(string(doc), `"state":"backoff"`)
	})
	waitFor(t, "b's third run", 15*time.Second, func() bool { return starts(b) >= 3 })
	time.Sleep(300 * time.Millisecond) // a third run of a, or a fourth of b, would show up here
	if n := starts(a); n != 2 {
		t.Errorf("a started %d times, want 2", n)
	}
	if n := starts(b); n != 3 {
		t.Errorf("b started %d times, want 3", n)
	}
	if !strings.Contains(a.stderr.String(), "delay=30m0s") {
		t.Errorf("a's second pod restart did not take the backoff delay:\n%s", a.stderr.String())
	}
	for _, s := range []*sup{a, b} {
		s.signal(syscall.SIGTERM)
		s.wait(10 * time.Second)
	}
}
