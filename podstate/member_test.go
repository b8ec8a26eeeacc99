package podstate

import (
	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/statevol"

	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

// memberRole is a container's supervisor reduced to what pod restarts
// need: it runs a real workload in its own process group, decides each
// exit with the rules, announces RestartAllContainers, and restarts the
// workload once for every pod restart it accepts. The real supervisor's
// loop calls the same API in the same places.
func memberRole() int {
	dir, name := os.Getenv("PODSTATE_DIR"), os.Getenv("PODSTATE_NAME")
	cfg, err := rules.Parse([]byte(os.Getenv("PODSTATE_CONFIG")))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	m, err := Join(dir, name, WatchOptions{ForcePoll: os.Getenv("PODSTATE_POLL") == "1", PollInterval: 20 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer m.Close()
	rec, err := NewRecorder(dir, statevol.Status{Container: name, Generation: m.Generation(), SupervisorPID: os.Getpid()}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	var pid int
	var exited chan int32 // nil while no workload runs (held)
	start := func() {
		cmd := exec.Command("sh", "-c", os.Getenv("PODSTATE_SCRIPT"))
		cmd.Env = append(os.Environ(), "STATE="+dir, "NAME="+name)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		pid = cmd.Process.Pid
		c := make(chan int32, 1)
		go func() {
			cmd.Wait()
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if ws.Signaled() {
				c <- 128 + int32(ws.Signal())
			} else {
				c <- int32(ws.ExitStatus())
			}
		}()
		exited = c
		gen := m.Generation()
		rec.Update(func(s *statevol.Status) { s.State, s.StartedAt, s.Generation = contract.PhaseRunning, time.Now(), gen })
	}
	start()
	for {
		select {
		case code := <-exited:
			exited = nil
			d, h := rules.Plan(cfg.Container, cfg.Pod(), code)
			e := &statevol.Exit{Code: code, Action: d.Action, At: time.Now()}
			if d.Rule >= 0 {
				e.Rule = &d.Rule
			}
			switch h {
			case rules.RestartInPlace:
				pod := d.Action == rules.ActionRestartAllContainers
				if pod {
					if _, _, err := m.Announce(code); err != nil {
						fmt.Fprintln(os.Stderr, err)
					}
				}
				rec.Update(func(s *statevol.Status) {
					s.Restarts++
					if pod {
						s.PodRestarts++
					}
					s.LastExit, s.LastRestart = e, e
				})
				start()
			case rules.Hold:
				rec.Update(func(s *statevol.Status) { s.State, s.LastExit = contract.PhaseHolding, e })
			default:
				rec.Update(func(s *statevol.Status) { s.State, s.LastExit = contract.PhaseExited, e })
				rec.Close()
				return int(code)
			}
		case g := <-m.Restarts():
			if !m.Accept(g) {
				continue
			}
			var e *statevol.Exit
			if exited != nil {
				// Like the kubelet: no grace period, the whole group.
				syscall.Kill(-pid, syscall.SIGKILL)
				e = &statevol.Exit{Code: <-exited, Signal: "SIGKILL", PodRestart: g.N, At: time.Now()}
			}
			rec.Update(func(s *statevol.Status) {
				s.Restarts++
				s.PodRestarts++
				if e != nil {
					s.LastExit, s.LastRestart = e, e
				}
			})
			start()
		case <-sigs:
			if exited != nil {
				syscall.Kill(-pid, syscall.SIGKILL)
				<-exited
			}
			rec.Update(func(s *statevol.Status) { s.State = contract.PhaseExited })
			if err := rec.Close(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			return 0
		}
	}
}

type container struct {
	name, config, script string
}

type pod struct {
	t    *testing.T
	dir  string
	poll bool
	cmds map[string]*exec.Cmd
	logs map[string]*bytes.Buffer
}

func (p *pod) start(c container) {
	cmd := exec.Command(os.Args[0])
	poll := "0"
	if p.poll {
		poll = "1"
	}
	cmd.Env = append(os.Environ(), "PODSTATE_TEST_ROLE=member", "PODSTATE_DIR="+p.dir, "PODSTATE_NAME="+c.name,
		"PODSTATE_CONFIG="+c.config, "PODSTATE_POLL="+poll,
		// Every run records its start in the shared volume, like the
		// upstream e2e's marker files.
		"PODSTATE_SCRIPT=echo $$ >> \"$STATE/starts-$NAME\"; "+c.script)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.cmds[c.name], p.logs[c.name] = cmd, out
}

func (p *pod) starts(name string) int { return len(readLines(filepath.Join(p.dir, "starts-"+name))) }

// settle waits until every container has started as often as wanted, then
// lets a moment pass so that a restart loop, if there were one, would show.
func (p *pod) settle(want map[string]int) {
	p.t.Helper()
	for name, n := range want {
		waitFor(p.t, fmt.Sprintf("%s to start %d times", name, n), func() bool { return p.starts(name) >= n })
	}
	time.Sleep(300 * time.Millisecond)
	for name, n := range want {
		if got := p.starts(name); got != n {
			p.t.Errorf("%s started %d times, want %d", name, got, n)
		}
	}
}

// stop ends every supervisor and returns the statuses they left.
func (p *pod) stop() map[string]statevol.Status {
	p.t.Helper()
	for name, cmd := range p.cmds {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			p.t.Errorf("%s: %v\n%s", name, err, p.logs[name])
		}
	}
	all, err := statevol.ReadAll(p.dir)
	if err != nil {
		p.t.Fatal(err)
	}
	out := map[string]statevol.Status{}
	for _, s := range all {
		out[s.Container] = s
	}
	return out
}

func newPod(t *testing.T, poll bool) *pod {
	p := &pod{t: t, dir: t.TempDir(), poll: poll, cmds: map[string]*exec.Cmd{}, logs: map[string]*bytes.Buffer{}}
	t.Cleanup(func() {
		for _, cmd := range p.cmds {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		}
	})
	return p
}

const (
	ruleAll    = `{"restartPolicy":"Never","podRestartPolicy":"Never","restartPolicyRules":[{"action":"RestartAllContainers","exitCodes":{"operator":"In","values":[42]}}]}`
	ruleAllAlw = `{"restartPolicy":"Always","podRestartPolicy":"Never","restartPolicyRules":[{"action":"RestartAllContainers","exitCodes":{"operator":"In","values":[42]}}]}`
	noRules    = `{"podRestartPolicy":"Never"}`
	// exit42Once exits 42 on the pod's first run and sleeps afterwards;
	// the marker lives in the shared volume, as in the upstream e2e.
	exit42Once = `if [ ! -e "$STATE/marker" ]; then touch "$STATE/marker"; exit 42; fi; exec sleep 600`
	sleeper    = `exec sleep 600`
)

func checkStatus(t *testing.T, st map[string]statevol.Status, name string, restarts, podRestarts int, gen uint64) {
	t.Helper()
	s, ok := st[name]
	if !ok {
		t.Fatalf("no status for %s", name)
	}
	if s.Restarts != restarts || s.PodRestarts != podRestarts || s.Generation != gen || s.State != contract.PhaseExited {
		t.Errorf("%s: restarts %d, pod restarts %d, generation %d, state %s; want %d, %d, %d, exited",
			name, s.Restarts, s.PodRestarts, s.Generation, s.State, restarts, podRestarts, gen)
	}
}

func podModes(t *testing.T, f func(t *testing.T, p *pod)) {
	t.Run("inotify", func(t *testing.T) { f(t, newPod(t, false)) })
	t.Run("poll", func(t *testing.T) { f(t, newPod(t, true)) })
}

// Upstream e2e: a regular container exits 42 with a RestartAllContainers
// rule; every container of the pod restarts once. A container started
// after the pod restart does not replay it.
func TestPodRegularContainerTriggers(t *testing.T) {
	podModes(t, func(t *testing.T, p *pod) {
		p.start(container{"sidecar", noRules, sleeper})
		p.start(container{"worker", noRules, sleeper})
		p.settle(map[string]int{"sidecar": 1, "worker": 1})
		p.start(container{"source", ruleAll, exit42Once})
		p.settle(map[string]int{"source": 2, "sidecar": 2, "worker": 2})
		p.start(container{"late", noRules, sleeper})
		p.settle(map[string]int{"late": 1, "source": 2, "sidecar": 2, "worker": 2})
		if n, _ := statevol.Current(p.dir); n != 1 {
			t.Fatalf("%d pod restarts, want 1", n)
		}
		if g := statevol.ReadGeneration(p.dir, 1); g.Source != "source" || g.ExitCode != 42 {
			t.Fatalf("generation 1: %+v", g)
		}
		st := p.stop()
		for _, name := range []string{"source", "sidecar", "worker"} {
			checkStatus(t, st, name, 1, 1, 1)
		}
		checkStatus(t, st, "late", 0, 0, 1)
		if s := st["worker"]; s.LastRestart == nil || s.LastRestart.Code != 137 || s.LastRestart.PodRestart != 1 {
			t.Errorf("worker's last restart: %+v", s.LastRestart)
		}
		if s := st["source"]; s.LastRestart == nil || s.LastRestart.Code != 42 || s.LastRestart.Rule == nil ||
			*s.LastRestart.Rule != 0 || s.LastRestart.Action != rules.ActionRestartAllContainers {
			t.Errorf("source's last restart: %+v", s.LastRestart)
		}
		all, err := statevol.ReadAll(p.dir)
		exited := 0
		for _, s := range all {
			if s.State == contract.PhaseExited {
				exited++
			}
		}
		if err != nil || exited != 4 {
			t.Errorf("status documents: %d exited of %d, err %v", exited, len(all), err)
		}
	})
}

// Upstream e2e: two containers carry the rule, one exits 42: each restarts
// once, no loop.
func TestPodTwoContainersCarryTheRule(t *testing.T) {
	podModes(t, func(t *testing.T, p *pod) {
		p.start(container{"other", ruleAll, sleeper})
		p.settle(map[string]int{"other": 1})
		p.start(container{"source", ruleAll, exit42Once})
		p.settle(map[string]int{"source": 2, "other": 2})
		if n, _ := statevol.Current(p.dir); n != 1 {
			t.Fatalf("%d pod restarts, want 1", n)
		}
		st := p.stop()
		checkStatus(t, st, "source", 1, 1, 1)
		checkStatus(t, st, "other", 1, 1, 1)
	})
}

// Upstream e2e: a container with policy Always and the rule first exits 1
// (restarted alone), then 42 (the whole pod restarts).
func TestPodFirstExit1Then42(t *testing.T) {
	podModes(t, func(t *testing.T, p *pod) {
		p.start(container{"other", noRules, sleeper})
		p.settle(map[string]int{"other": 1})
		script := `n=$(wc -l < "$STATE/starts-$NAME"); [ "$n" -eq 1 ] && exit 1; [ "$n" -eq 2 ] && exit 42; exec sleep 600`
		p.start(container{"source", ruleAllAlw, script})
		p.settle(map[string]int{"source": 3, "other": 2})
		if n, _ := statevol.Current(p.dir); n != 1 {
			t.Fatalf("%d pod restarts, want 1", n)
		}
		st := p.stop()
		checkStatus(t, st, "source", 2, 1, 1)
		checkStatus(t, st, "other", 1, 1, 1)
	})
}

// Two containers hit the rule at the same moment, in the same generation:
// one pod restart, each container restarted once.
func TestPodSimultaneousTriggers(t *testing.T) {
	podModes(t, func(t *testing.T, p *pod) {
		script := `if [ ! -e "$STATE/done-$NAME" ]; then touch "$STATE/done-$NAME"; ` +
			`while [ ! -e "$STATE/go" ]; do sleep 0.01; done; exit 42; fi; exec sleep 600`
		p.start(container{"a", ruleAll, script})
		p.start(container{"b", ruleAll, script})
		p.start(container{"c", noRules, sleeper})
		p.settle(map[string]int{"a": 1, "b": 1, "c": 1})
		os.WriteFile(filepath.Join(p.dir, "go"), nil, 0o644)
		p.settle(map[string]int{"a": 2, "b": 2, "c": 2})
		if n, _ := statevol.Current(p.dir); n != 1 {
			t.Fatalf("%d pod restarts, want 1", n)
		}
		st := p.stop()
		for _, name := range []string{"a", "b", "c"} {
			checkStatus(t, st, name, 1, 1, 1)
		}
	})
}
