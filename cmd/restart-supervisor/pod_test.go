package main_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
	if !strings.Contains(b.stderr.String(), "pod restart; stopping the workload") {
		t.Errorf("b's log lacks the pod restart")
	}
	doc, _ := os.ReadFile(filepath.Join(state, "status", "b.json"))
	if !strings.Contains(string(doc), `"podRestarts":1`) || !strings.Contains(string(doc), `"podRestart":1`) {
		t.Errorf("b's status document lacks podRestarts 1 or the pod restart that killed its last run: %s", doc)
	}
}

// TestConfigFileIsReloaded: a rule added to the --config file while the
// workload runs decides its next exit, noticed by polling (the default)
// and by inotify.
func TestConfigFileIsReloaded(t *testing.T) {
	for _, watch := range []string{"", "poll", "inotify"} {
		t.Run("watch="+watch, func(t *testing.T) { testConfigFileIsReloaded(t, watch) })
	}
}

func testConfigFileIsReloaded(t *testing.T, watch string) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "cfg.yaml", "restartPolicy: Never\npodRestartPolicy: Never\n", 0o644)
	w := writeFile(t, dir, "w.sh", fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/n
[ $n = 1 ] && { while [ ! -e %[1]s/go ]; do sleep 0.02; done; exit 42; }
exit 0
`, dir), 0o755)
	argv := []string{bin, "--config", cfg, "--", w}
	if watch != "" {
		argv = []string{bin, "--config-watch", watch, "--config", cfg, "--", w}
	}
	s := start(t, nil, argv...)
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

// TestRepeatedPodRestartsWaitNoBackoff: a workload that hits its
// RestartAllContainers rule at its first three starts restarts the pod
// three times, and every member starts each round at once, the announcer
// and the other alike, as upstream (the kubelet removes every container,
// so doBackOff has no exited status to measure a back-off from:
// kuberuntime_manager.go, k8s.io/kubernetes v1.37.2). The back-off is 30
// minutes: a step of it anywhere would outlast the test. Runs are counted
// from the supervisors' own "workload started" lines: a run stopped a few
// milliseconds after its start may not get to record itself.
func TestRepeatedPodRestartsWaitNoBackoff(t *testing.T) {
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
	a := start(t, env("a"), bin, "--", "sh", "-c",
		fmt.Sprintf(`n=$(cat %[1]s/a.n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/a.n; [ $n -le 3 ] && exit 88; exec sleep 60`, dir))
	for _, name := range []string{"a", "b"} {
		waitFor(t, name+" running in generation 3", 30*time.Second, func() bool {
			doc, _ := os.ReadFile(filepath.Join(state, "status", name+".json"))
			return strings.Contains(string(doc), `"state":"running"`) && strings.Contains(string(doc), `"generation":3`)
		})
	}
	if n := starts(a); n != 4 {
		t.Errorf("a started %d times, want 4", n)
	}
	// b restarts once per generation; generations that arrive while it
	// stops join that restart, so it starts two to four times.
	if n := starts(b); n < 2 || n > 4 {
		t.Errorf("b started %d times, want 2 to 4:\n%s", n, b.stderr.String())
	}
	for _, s := range []*sup{a, b} {
		if strings.Contains(s.stderr.String(), `msg="pod restart back-off"`) {
			t.Errorf("a pod restart waited a back-off:\n%s", s.stderr.String())
		}
	}
	for _, s := range []*sup{a, b} {
		s.signal(syscall.SIGTERM)
		s.wait(10 * time.Second)
	}
}

// podEnv is the environment of a pod member's supervisor.
func podEnv(state, name, config string, extra ...string) []string {
	return append([]string{"RESTART_SUPERVISOR_STATE_DIR=" + state, "RESTART_SUPERVISOR_CONTAINER_NAME=" + name,
		"RESTART_SUPERVISOR_CONFIG=" + config}, extra...)
}

const restartAll88 = `{"restartPolicy":"Never","podRestartPolicy":"Never","restartPolicyRules":[{"action":"RestartAllContainers","exitCodes":{"operator":"In","values":[88]}}]}`

// readStatusDoc reads a member's status document.
func readStatusDoc(t *testing.T, state, name string) map[string]any {
	t.Helper()
	var doc map[string]any
	b, err := os.ReadFile(filepath.Join(state, "status", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestPodRestartStopsLikeTheKubelet: a pod restart stops the other
// containers as the kubelet's killContainer does, with the container's
// stop signal and SIGKILL only after 2 s. Container b's stop signal is
// SIGUSR1 (as the injector passes a lifecycle.stopSignal); its handler
// takes half a second to write a marker and exit 3, and gets to. Container
// c ignores SIGTERM and is SIGKILLed after the grace period.
func TestPodRestartStopsLikeTheKubelet(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	counted := func(name, body string) string {
		return writeFile(t, dir, name+".sh", fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/%[2]s.n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/%[2]s.n
echo > %[1]s/%[2]s.ready.$n
%[3]s
`, dir, name, body), 0o755)
	}
	b := start(t, podEnv(state, "b", `{}`, "RESTART_SUPERVISOR_STOP_SIGNALS=SIGTERM,SIGINT,SIGUSR1"), bin, "--",
		counted("b", fmt.Sprintf(`trap 'sleep 0.5; echo $n > %s/b.stopped; exit 3' USR1; while :; do sleep 0.05; done`, dir)))
	c := start(t, podEnv(state, "c", `{}`, "RESTART_SUPERVISOR_GRACE_PERIOD=1s"), bin, "--", counted("c", `trap '' TERM; while :; do sleep 0.05; done`))
	ready := func(name string, run int) {
		waitFor(t, fmt.Sprintf("%s run %d", name, run), 20*time.Second, func() bool {
			_, err := os.Stat(filepath.Join(dir, fmt.Sprintf("%s.ready.%d", name, run)))
			return err == nil
		})
	}
	ready("b", 1)
	ready("c", 1)
	a := start(t, podEnv(state, "a", restartAll88), bin, "--", counted("a", `[ $n = 1 ] && exit 88; exec sleep 60`))
	ready("b", 2)
	ready("c", 2)
	ready("a", 2)
	if got, err := os.ReadFile(filepath.Join(dir, "b.stopped")); err != nil || strings.TrimSpace(string(got)) != "1" {
		t.Errorf("b's stop handler did not run to its end in run 1 (%q, %v):\n%s", got, err, b.stderr.String())
	}
	for _, tc := range []struct {
		name   string
		code   float64
		signal any
	}{{"b", 3, nil}, {"c", 137, "SIGKILL"}} {
		waitFor(t, tc.name+"'s status document", 10*time.Second, func() bool {
			r, _ := readStatusDoc(t, state, tc.name)["lastRestart"].(map[string]any)
			return r != nil
		})
		r := readStatusDoc(t, state, tc.name)["lastRestart"].(map[string]any)
		if r["code"] != tc.code || r["signal"] != tc.signal || r["podRestart"] != float64(1) {
			t.Errorf("%s: last restart %v, want code %v signal %v podRestart 1", tc.name, r, tc.code, tc.signal)
		}
	}
	if !strings.Contains(c.stderr.String(), `msg="grace period expired; killing the workload's process group"`) ||
		!strings.Contains(c.stderr.String(), "gracePeriod=2s") {
		t.Errorf("c was not SIGKILLed at the end of the 2 s grace period:\n%s", c.stderr.String())
	}
	for _, s := range []*sup{a, b, c} {
		s.signal(syscall.SIGTERM)
		s.wait(10 * time.Second)
	}
}

// flood starts a process that creates a pod restart generation every 10 ms,
// count times, naming source as the announcer, as any container that can
// write the state volume can.
func flood(t *testing.T, state, source string, count int) *exec.Cmd {
	t.Helper()
	os.MkdirAll(filepath.Join(state, "pod-restarts"), 0o777)
	cmd := exec.Command("sh", "-c", fmt.Sprintf(`
d=%s/pod-restarts; i=0
while [ $i -lt %d ]; do
  i=$((i+1)); n=$(printf %%020d $((i+1000)))
  printf '{"generation":%%d,"source":"%s","exitCode":88}\n' $((i+1000)) > $d/.f.tmp && mv $d/.f.tmp $d/$n
  sleep 0.01
done`, state, count, source))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// TestForgedPodRestartsAreIgnored: generation files naming a container
// that announced nothing restart no one, however many are created, and a
// real announcement afterwards still restarts every member once.
func TestForgedPodRestartsAreIgnored(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	members := "RESTART_SUPERVISOR_POD_MEMBERS=a:regular,b:regular"
	starts := func(s *sup) int { return strings.Count(s.stderr.String(), `msg="workload started"`) }
	a := start(t, podEnv(state, "a", restartAll88, members), bin, "--", "sh", "-c",
		fmt.Sprintf(`[ -e %[1]s/a.done ] && exec sleep 60; while [ ! -e %[1]s/go ]; do sleep 0.02; done; touch %[1]s/a.done; exit 88`, dir))
	b := start(t, podEnv(state, "b", `{}`, members), bin, "--", "sleep", "60")
	waitFor(t, "a and b started", 15*time.Second, func() bool { return starts(a) == 1 && starts(b) == 1 })
	for _, source := range []string{"a", "ghost", "../x"} {
		f := flood(t, state, source, 100)
		if err := f.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	for _, s := range []*sup{a, b} {
		if n := starts(s); n != 1 {
			t.Fatalf("a member started %d times during the forged generations, want 1:\n%s", n, s.stderr.String())
		}
	}
	if !strings.Contains(b.stderr.String(), "pod restart file ignored") {
		t.Errorf("b did not log the forged generations:\n%s", b.stderr.String())
	}
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	waitFor(t, "a and b restarted", 20*time.Second, func() bool { return starts(a) == 2 && starts(b) == 2 })
	time.Sleep(300 * time.Millisecond)
	if starts(a) != 2 || starts(b) != 2 {
		t.Errorf("a started %d times, b %d, want 2 each", starts(a), starts(b))
	}
	for _, s := range []*sup{a, b} {
		s.signal(syscall.SIGTERM)
		s.wait(10 * time.Second)
	}
}

// TestPodRestartFloodRestartsOncePerRound: a writer with the UID of a
// member's supervisor can forge that member's status document too, and
// then its generations pass the check. With no back-off between pod
// restarts (as upstream) what bounds it is the round: a member restarts
// at most once per generation, generations arriving while it stops or
// waits join that round, and each restart goes into a newer generation
// than the one before.
func TestPodRestartFloodRestartsOncePerRound(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.MkdirAll(filepath.Join(state, "status"), 0o777)
	ghost := `{"container":"ghost","state":"exited","announced":1000000,"lastRestart":{"code":88,"action":"RestartAllContainers","at":"2026-01-01T00:00:00Z"}}`
	if err := os.WriteFile(filepath.Join(state, "status", "ghost.json"), []byte(ghost), 0o644); err != nil {
		t.Fatal(err)
	}
	starts := func(s *sup) int { return strings.Count(s.stderr.String(), `msg="workload started"`) }
	b := start(t, podEnv(state, "b", `{"backoff":{"initial":"1h","max":"1h"}}`, "RESTART_SUPERVISOR_POD_MEMBERS=b:regular"), bin, "--", "sleep", "60")
	waitFor(t, "b started", 15*time.Second, func() bool { return starts(b) == 1 })
	f := flood(t, state, "ghost", 300)
	if err := f.Wait(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b running in the last generation", 20*time.Second, func() bool {
		doc, _ := os.ReadFile(filepath.Join(state, "status", "b.json"))
		return strings.Contains(string(doc), `"state":"running"`) && strings.Contains(string(doc), `"generation":1300`)
	})
	n := starts(b)
	if n < 2 || n > 301 {
		t.Errorf("b started %d times, want 2 to 301 (its first run, then at most one per generation):\n%s", n, b.stderr.String())
	}
	if got := int(readStatusDoc(t, state, "b")["podRestarts"].(float64)); got != n-1 {
		t.Errorf("b's document counts %d pod restarts, its log %d starts", got, n)
	}
	prev := 0
	for _, l := range strings.Split(b.stderr.String(), "\n") {
		if !strings.Contains(l, `msg="pod restart; stopping the workload"`) {
			continue
		}
		var g int
		if _, err := fmt.Sscanf(l[strings.Index(l, " generation=")+1:], "generation=%d", &g); err != nil || g <= prev {
			t.Fatalf("pod restart of generation %d after %d: %s", g, prev, l)
		}
		prev = g
	}
	t.Logf("300 forged generations: b started %d times", n)
	b.signal(syscall.SIGTERM)
	if st := b.wait(10 * time.Second); st != 143 {
		t.Errorf("b exit status %d, want 143", st)
	}
}

// TestPodRestartRound: no member starts a new round before every member
// stopped the old one, and the sidecar starts before the regular
// containers. Container slow takes a second to stop; a announces twice.
// The sidecar's back-off is the longest (3 s against 100 ms), so in the
// second pod restart the regular containers are ready first and must wait
// for it. Each workload appends its starts and stops to one events file.
func TestPodRestartRound(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	ev := filepath.Join(dir, "events")
	members := "RESTART_SUPERVISOR_POD_MEMBERS=side:sidecar,a:regular,slow:regular"
	script := func(name, onStop, body string) string {
		return writeFile(t, dir, name+".sh", fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/%[2]s.n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/%[2]s.n
echo "start %[2]s $n" >> %[3]s
trap '%[4]s echo "stop %[2]s $n" >> %[3]s; exit 0' TERM
%[5]s
`, dir, name, ev, onStop, body), 0o755)
	}
	wait := `while :; do sleep 0.02; done`
	fast := `"backoff":{"initial":"100ms"}`
	side := start(t, podEnv(state, "side", `{"backoff":{"initial":"3s"}}`, members), bin, "--", script("side", "", wait))
	slow := start(t, podEnv(state, "slow", "{"+fast+"}", members), bin, "--", script("slow", "sleep 1;", wait))
	waitFor(t, "side and slow started", 15*time.Second, func() bool { return countIn(t, dir, "side.n") == 1 && countIn(t, dir, "slow.n") == 1 })
	a := start(t, podEnv(state, "a", strings.Replace(restartAll88, "{", "{"+fast+",", 1), members), bin, "--", script("a", "",
		fmt.Sprintf(`if [ $n -le 2 ]; then while [ ! -e %[1]s/go$n ]; do sleep 0.02; done; echo "stop a $n" >> %[2]s; exit 88; fi; %[3]s`, dir, ev, wait)))
	for round := 2; round <= 3; round++ {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("go%d", round-1)), nil, 0o644)
		waitFor(t, fmt.Sprintf("round %d", round), 20*time.Second, func() bool {
			return countIn(t, dir, "side.n") == round && countIn(t, dir, "slow.n") == round && countIn(t, dir, "a.n") == round
		})
	}
	time.Sleep(300 * time.Millisecond)
	data, _ := os.ReadFile(ev)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	for round := 2; round <= 3; round++ {
		lastStop, firstStart := -1, len(lines)
		startAt := map[string]int{}
		for i, l := range lines {
			switch {
			case strings.HasPrefix(l, "stop ") && strings.HasSuffix(l, fmt.Sprintf(" %d", round-1)):
				lastStop = i
			case strings.HasPrefix(l, "start ") && strings.HasSuffix(l, fmt.Sprintf(" %d", round)):
				firstStart = min(firstStart, i)
				startAt[strings.Fields(l)[1]] = i
			}
		}
		if len(startAt) != 3 || lastStop < 0 || firstStart < lastStop {
			t.Errorf("round %d: a start precedes a stop of round %d:\n%s", round, round-1, data)
		}
		// The supervisors' own start lines: a workload's first line of
		// output may lag behind its start.
		sideAt := startedAt(t, side, round)
		for _, s := range []*sup{a, slow} {
			if at := startedAt(t, s, round); at.Before(sideAt) {
				t.Errorf("round %d: a regular container started at %s, before the sidecar at %s", round, at, sideAt)
			}
		}
	}
	for _, s := range []*sup{a, side, slow} {
		s.signal(syscall.SIGTERM)
		s.wait(10 * time.Second)
	}
}

// startedAt returns when a supervisor logged the start of the workload's
// run number run.
func startedAt(t *testing.T, s *sup, run int) time.Time {
	t.Helper()
	for _, l := range strings.Split(s.stderr.String(), "\n") {
		if strings.Contains(l, `msg="workload started"`) && strings.HasSuffix(l, fmt.Sprintf(" restarts=%d", run-1)) {
			at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(strings.Fields(l)[0], "time="))
			if err != nil {
				t.Fatal(err)
			}
			return at
		}
	}
	t.Fatalf("no start of run %d in:\n%s", run, s.stderr.String())
	return time.Time{}
}

// TestInitRerunRound: the re-run of an init container, between a sidecar
// and a regular container. It runs nothing at the pod's first start; in a
// pod restart it runs after the sidecar started and before the regular
// container starts again; when its run fails for good (exit 3 in a Never
// pod) the regular container ends with that code instead of starting.
func TestInitRerunRound(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	ev := filepath.Join(dir, "events")
	members := "RESTART_SUPERVISOR_POD_MEMBERS=side:sidecar,fetch-rerun:init,a:regular"
	script := func(name, body string) string {
		return writeFile(t, dir, name+".sh", fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/%[2]s.n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/%[2]s.n
echo "start %[2]s $n" >> %[3]s
trap 'echo "stop %[2]s $n" >> %[3]s; exit 0' TERM
%[4]s
`, dir, name, ev, body), 0o755)
	}
	wait := `while :; do sleep 0.02; done`
	fast := `"backoff":{"initial":"100ms"}`
	side := start(t, podEnv(state, "side", "{"+fast+"}", members), bin, "--", script("side", wait))
	fetch := start(t, podEnv(state, "fetch-rerun", `{"restartPolicy":"Never","podRestartPolicy":"Never","initContainer":true,`+fast+`}`, members),
		bin, "--", script("fetch", fmt.Sprintf(`sleep 1; echo "done fetch $n" >> %s; [ $n -eq 2 ] && exit 3; exit 0`, ev)))
	fetch.waitLog("waiting for a pod restart", 10*time.Second)
	a := start(t, podEnv(state, "a", strings.Replace(restartAll88, "{", "{"+fast+",", 1), members), bin, "--", script("a",
		fmt.Sprintf(`while [ ! -e %[1]s/go$n ]; do sleep 0.02; done; echo "stop a $n" >> %[2]s; exit 88`, dir, ev)))
	waitFor(t, "side and a started", 15*time.Second, func() bool { return countIn(t, dir, "side.n") == 1 && countIn(t, dir, "a.n") == 1 })
	if n := countIn(t, dir, "fetch.n"); n != 0 {
		t.Fatalf("the init re-run ran %d times before any pod restart", n)
	}

	os.WriteFile(filepath.Join(dir, "go1"), nil, 0o644)
	waitFor(t, "round 2", 20*time.Second, func() bool { return countIn(t, dir, "a.n") == 2 })
	data, _ := os.ReadFile(ev)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	at := map[string]int{}
	for i, l := range lines {
		at[l] = i
	}
	// The sidecar starts before the re-run: the supervisors' own start
	// lines say when (a workload's first line lags its start by the time
	// its shell takes).
	if sideAt, fetchAt := startedAt(t, side, 2), startedAt(t, fetch, 2); fetchAt.Before(sideAt) {
		t.Fatalf("the re-run started at %s, before the sidecar at %s", fetchAt, sideAt)
	}
	for _, before := range [][2]string{
		{"stop a 1", "start side 2"}, {"stop side 1", "start fetch 1"}, {"done fetch 1", "start a 2"},
	} {
		i, ok1 := at[before[0]]
		j, ok2 := at[before[1]]
		if !ok1 || !ok2 || i > j {
			t.Fatalf("want %q before %q:\n%s", before[0], before[1], data)
		}
	}

	// Round 3: the re-run fails for good; a ends with its code.
	os.WriteFile(filepath.Join(dir, "go2"), nil, 0o644)
	if st := a.wait(20 * time.Second); st != 3 {
		t.Fatalf("a exited %d, want 3 (the failed re-run's code)\n%s", st, a.stderr.String())
	}
	if n := countIn(t, dir, "a.n"); n != 2 {
		t.Fatalf("a ran %d times, want 2: it must not start after the failed re-run", n)
	}
	if doc := readStatusDoc(t, state, "fetch-rerun"); doc["state"] != "held" {
		t.Fatalf("fetch-rerun status %v, want held", doc)
	}
	for _, s := range []*sup{side, fetch} {
		s.signal(syscall.SIGTERM)
		s.wait(10 * time.Second)
	}
}

// TestEndedContainerFollowsPodRestart: upstream a pod restart restarts a
// container that has already ended. a exits 0 at once (no rules, Never
// pod) and stays, ended, while b runs; b's RestartAllContainers exit then
// restarts a too. When both have ended for good, both exit with their own
// status.
func TestEndedContainerFollowsPodRestart(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	members := "RESTART_SUPERVISOR_POD_MEMBERS=a:regular,b:regular"
	script := func(name, body string) string { return countingScript(t, dir, name, body) }
	fast := `"backoff":{"initial":"100ms"}`
	a := start(t, podEnv(state, "a", `{"restartPolicy":"Never","podRestartPolicy":"Never",`+fast+`}`, members), bin, "--",
		script("a", fmt.Sprintf(`[ $n -ge 2 ] && while [ ! -e %s/end ]; do sleep 0.02; done; exit 0`, dir)))
	b := start(t, podEnv(state, "b", strings.Replace(restartAll88, "{", "{"+fast+",", 1), members), bin, "--",
		script("b", fmt.Sprintf(`if [ $n -eq 1 ]; then while [ ! -e %[1]s/go ]; do sleep 0.02; done; exit 88; fi
while [ ! -e %[1]s/end ]; do sleep 0.02; done; exit 7`, dir)))
	waitFor(t, "a ended", 15*time.Second, func() bool { return countIn(t, dir, "a.n") == 1 && statusState(state, "a") == "ended" })
	select {
	case <-a.done:
		t.Fatalf("a's supervisor exited while b runs:\n%s", a.stderr.String())
	case <-time.After(500 * time.Millisecond):
	}
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	waitFor(t, "round 2", 20*time.Second, func() bool { return countIn(t, dir, "a.n") == 2 && countIn(t, dir, "b.n") == 2 })
	os.WriteFile(filepath.Join(dir, "end"), nil, 0o644)
	if st := a.wait(10 * time.Second); st != 0 {
		t.Fatalf("a exited %d, want 0\n%s", st, a.stderr.String())
	}
	if st := b.wait(10 * time.Second); st != 7 {
		t.Fatalf("b exited %d, want 7\n%s", st, b.stderr.String())
	}
}

// TestPreviouslyRestartedMemberRestartsThePod is upstream's e2e spec
// "should restart all containers on a previously restarted regular
// container exit" (test/e2e/common/node/container_restart_policy.go:440-488,
// v1.37.2) as processes, the test playing the kubelet: pod Always; source
// (container Always, RestartAllContainers In [42]) exits 1, then 42, then
// runs; regular has no rules and runs. Exit 1 is the container policy's
// restart, which the pod's policy gives too: the supervisor hands it over
// at once, although regular runs, and the kubelet starts the container
// again; its exit 42 then restarts regular in place.
func TestPreviouslyRestartedMemberRestartsThePod(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	members := "RESTART_SUPERVISOR_POD_MEMBERS=source:regular,regular:regular"
	script := func(name, body string) string { return countingScript(t, dir, name, body) }
	sourceConfig := `{"restartPolicy":"Always","podRestartPolicy":"Always","backoff":{"initial":"100ms"},` +
		`"restartPolicyRules":[{"action":"RestartAllContainers","exitCodes":{"operator":"In","values":[42]}}]}`
	source := script("source", `case $n in 1) exit 1 ;; 2) exit 42 ;; esac; exec sleep 60`)
	regular := start(t, podEnv(state, "regular", `{"podRestartPolicy":"Always"}`, members), bin, "--",
		script("regular", "exec sleep 60"))
	waitFor(t, "regular running", 15*time.Second, func() bool { return countIn(t, dir, "regular.n") == 1 })
	first := start(t, podEnv(state, "source", sourceConfig, members), bin, "--", source)
	if st := first.wait(10 * time.Second); st != 1 {
		t.Fatalf("source's first supervisor exited %d, want 1, handed to the kubelet while regular runs", st)
	}
	if !strings.Contains(first.stderr.String(), "passing its status on to the kubelet") {
		t.Errorf("no hand-over logged:\n%s", first.stderr.String())
	}
	// The kubelet starts the container again: a new supervisor.
	second := start(t, podEnv(state, "source", sourceConfig, members), bin, "--", source)
	waitFor(t, "the pod restart", 20*time.Second, func() bool {
		return countIn(t, dir, "source.n") == 3 && countIn(t, dir, "regular.n") == 2
	})
	for _, s := range []*sup{second, regular} {
		s.signal(syscall.SIGTERM)
		if st := s.wait(10 * time.Second); st != 143 {
			t.Errorf("supervisor exited %d after SIGTERM, want 143", st)
		}
	}
}

// TestEndedMemberWaitsForAKubeletRestart: pod OnFailure, no rules. a exits
// 0, which ends it, and waits in phase Ended while b runs. b exits 1: the
// pod's policy restarts that, so b's supervisor hands it over and the
// kubelet starts b again. a must go on waiting: b has not ended, and a pod
// restart from b's next run restarts a too. Once b exits 0, both end.
func TestEndedMemberWaitsForAKubeletRestart(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	members := "RESTART_SUPERVISOR_POD_MEMBERS=a:regular,b:regular"
	config := `{"podRestartPolicy":"OnFailure"}`
	a := start(t, podEnv(state, "a", config, members), bin, "--", "true")
	waitFor(t, "a ended", 15*time.Second, func() bool { return statusState(state, "a") == "ended" })
	bScript := countingScript(t, dir, "b", fmt.Sprintf(`[ $n -eq 1 ] && exit 1
while [ ! -e %s/end ]; do sleep 0.02; done; exit 0`, dir))
	b1 := start(t, podEnv(state, "b", config, members), bin, "--", bScript)
	if st := b1.wait(10 * time.Second); st != 1 {
		t.Fatalf("b's first supervisor exited %d, want 1", st)
	}
	// Longer than a's poll of the others (endedPoll) several times over:
	// the kubelet's back-off may keep b down far longer.
	select {
	case <-a.done:
		t.Fatalf("a's supervisor exited while the kubelet restarts b:\n%s", a.stderr.String())
	case <-time.After(2 * time.Second):
	}
	b2 := start(t, podEnv(state, "b", config, members), bin, "--", bScript)
	waitFor(t, "b's second run", 15*time.Second, func() bool { return countIn(t, dir, "b.n") == 2 })
	os.WriteFile(filepath.Join(dir, "end"), nil, 0o644)
	if st := b2.wait(10 * time.Second); st != 0 {
		t.Fatalf("b exited %d, want 0", st)
	}
	if st := a.wait(10 * time.Second); st != 0 {
		t.Fatalf("a exited %d, want 0", st)
	}
}

// countingScript writes dir/name.sh: a workload that counts its runs in
// dir/name.n (the count in $n) and then runs body.
func countingScript(t *testing.T, dir, name, body string) string {
	return writeFile(t, dir, name+".sh", fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/%[2]s.n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/%[2]s.n
%[3]s
`, dir, name, body), 0o755)
}

// statusState is the state field of a member's status document, "" when
// it cannot be read.
func statusState(state, name string) string {
	var doc struct {
		State string `json:"state"`
	}
	b, err := os.ReadFile(filepath.Join(state, "status", name+".json"))
	if err != nil || json.Unmarshal(b, &doc) != nil {
		return ""
	}
	return doc.State
}

// inotifyInstances counts the inotify descriptors process pid holds.
func inotifyInstances(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// TestPodRestartsWatchedWhereExpected: a supervisor holds an inotify watch
// on pod-restarts/ only where a pod restart is expected, a member list
// (which the injector writes for a pod with RestartAllContainers) or a
// RestartAllContainers rule of its own, since releasing the watch delays
// the container's exit. The others hold none.
func TestPodRestartsWatchedWhereExpected(t *testing.T) {
	for _, c := range []struct {
		name   string
		config string
		extra  []string
		want   int
	}{
		{"no RestartAllContainers, no members", restart42, nil, 0},
		{"member list", `{"restartPolicy":"Never","podRestartPolicy":"Never"}`, []string{"RESTART_SUPERVISOR_POD_MEMBERS=a:regular,b:regular"}, 1},
		{"own RestartAllContainers rule", restartAll88, nil, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			state := t.TempDir()
			s := start(t, podEnv(state, "a", c.config, c.extra...), bin, "--", "sleep", "60")
			s.waitLog("workload started", 15*time.Second)
			if got := inotifyInstances(t, s.cmd.Process.Pid); got != c.want {
				t.Errorf("supervisor holds %d inotify instances, want %d", got, c.want)
			}
			s.signal(syscall.SIGTERM)
			if st := s.wait(10 * time.Second); st != 143 {
				t.Errorf("exit status %d, want 143", st)
			}
		})
	}
}

// TestPodRestartFollowedByPolling: a container wrapped by hand, with no
// member list and no RestartAllContainers rule of its own, polls
// pod-restarts/ and still follows the pod restart another container
// announces, once.
func TestPodRestartFollowedByPolling(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	b := start(t, podEnv(state, "b", restart42), bin, "--", "sleep", "60")
	b.waitLog("workload started", 15*time.Second)
	if n := inotifyInstances(t, b.cmd.Process.Pid); n != 0 {
		t.Fatalf("b holds %d inotify instances, want 0 (polling)", n)
	}
	first := filepath.Join(dir, "a.ran")
	a := start(t, podEnv(state, "a", restartAll88), bin, "--", "sh", "-c",
		fmt.Sprintf(`[ -e %[1]s ] && exec sleep 60; touch %[1]s; exit 88`, first))
	waitFor(t, "b restarted for the pod restart", 15*time.Second, func() bool {
		return strings.Count(b.stderr.String(), `msg="workload started"`) == 2
	})
	if !strings.Contains(b.stderr.String(), "pod restart; stopping the workload") {
		t.Errorf("b's second start was not for the pod restart:\n%s", b.stderr.String())
	}
	time.Sleep(1500 * time.Millisecond) // a second restart of b, one poll later, would show up here
	if n := strings.Count(b.stderr.String(), `msg="workload started"`); n != 2 {
		t.Errorf("b started %d times, want 2", n)
	}
	for _, s := range []*sup{a, b} {
		s.signal(syscall.SIGTERM)
		s.wait(10 * time.Second)
	}
}

// inotifyWatches counts the watches on the inotify descriptors process
// pid holds, from their fdinfo.
func inotifyWatches(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err != nil || l != "anon_inode:inotify" {
			continue
		}
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
		if err != nil {
			t.Fatal(err)
		}
		n += strings.Count(string(info), "inotify wd:")
	}
	return n
}

// TestStopRemovesTheWatches: once a stop is under way no pod restart and
// no reloaded rule can change what the supervisor does, and it removes its
// inotify watches (pod-restarts/ and the --config file's directory) while
// the workload is still finishing, keeping the instances until it exits:
// an instance closed with a watch on it holds the exit up. The stop itself
// goes on as before.
func TestStopRemovesTheWatches(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	cfg := writeFile(t, dir, "cfg.json", `{"restartPolicy":"Never","podRestartPolicy":"Never"}`, 0o644)
	stopped := filepath.Join(dir, "stopped")
	// The workload takes its time over the stop: the supervisor is in
	// phase stopping until the test lets it go. It says when its trap is
	// set: a SIGTERM before that (the supervisor logs "workload started"
	// at the fork) kills the shell at once.
	w := writeFile(t, dir, "w.sh", fmt.Sprintf(`#!/bin/sh
trap 'touch %[1]s; while [ ! -e %[1]s.go ]; do sleep 0.02; done; exit 0' TERM
touch %[1]s.trapped
while :; do sleep 0.02; done
`, stopped), 0o755)
	s := start(t, []string{"RESTART_SUPERVISOR_STATE_DIR=" + state, "RESTART_SUPERVISOR_CONTAINER_NAME=a",
		"RESTART_SUPERVISOR_POD_MEMBERS=a:regular,b:regular"},
		bin, "--config-watch", "inotify", "--config", cfg, "--", w)
	waitFor(t, "the workload's trap", 15*time.Second, func() bool {
		_, err := os.Stat(stopped + ".trapped")
		return err == nil
	})
	pid := s.cmd.Process.Pid
	if n := inotifyWatches(t, pid); n < 2 {
		t.Fatalf("%d inotify watches while running, want pod-restarts/ and the config's directory", n)
	}
	s.signal(syscall.SIGTERM)
	waitFor(t, "the workload's stop handler", 15*time.Second, func() bool {
		_, err := os.Stat(stopped)
		return err == nil
	})
	waitFor(t, "no inotify watch left while stopping", 15*time.Second, func() bool { return inotifyWatches(t, pid) == 0 })
	if n := inotifyInstances(t, pid); n != 2 {
		t.Errorf("%d inotify instances while stopping, want both kept until the exit", n)
	}
	if doc := readStatusDoc(t, state, "a"); doc["state"] != "stopping" {
		t.Errorf("status document says %v, want stopping", doc["state"])
	}
	if err := os.WriteFile(stopped+".go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if st := s.wait(15 * time.Second); st != 0 {
		t.Errorf("exit status %d, want 0 (the workload's own exit after the stop)", st)
	}
}

// TestFullVolumeEndedMembersEnd: a co-container fills the pod's state
// volume (a Memory emptyDir with a size limit; here a real 256 KiB tmpfs)
// and then both members' workloads exit 0 in a Never pod. Neither can
// write the status document that says it ended (ENOSPC), and each waits
// in phase Ended for the other: with documents alone they waited for ever.
// The ended marker, an empty file that needs no data block, says it, and
// both exit with their workload's status.
func TestFullVolumeEndedMembersEnd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	if err := unix.Mount("tmpfs", state, "tmpfs", 0, "size=256k,mode=1777"); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(state, unix.MNT_DETACH) })
	members := "RESTART_SUPERVISOR_POD_MEMBERS=a:regular,b:regular"
	cfg := `{"restartPolicy":"Never","podRestartPolicy":"Never"}`
	goFile := filepath.Join(dir, "go") // outside the volume
	var sups []*sup
	for _, name := range []string{"a", "b"} {
		sups = append(sups, start(t, podEnv(state, name, cfg, members), bin, "--",
			"sh", "-c", fmt.Sprintf(`while [ ! -e %s ]; do sleep 0.02; done; exit 0`, goFile)))
	}
	waitFor(t, "both documents", 15*time.Second, func() bool {
		return statusState(state, "a") == "running" && statusState(state, "b") == "running"
	})
	fill, err := os.Create(filepath.Join(state, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 16<<10)
	for {
		if _, err := fill.Write(chunk); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("filling the volume: %v", err)
			}
			break
		}
	}
	fill.Close()
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, s := range sups {
		if st := s.wait(20 * time.Second); st != 0 {
			t.Errorf("member %d exited %d, want 0", i, st)
		}
	}
	if !strings.Contains(sups[0].stderr.String()+sups[1].stderr.String(), "cannot write the status document") {
		t.Errorf("no status document write failed: the volume was not full, the test shows nothing")
	}
}
