package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// `restart-injector compose` on the real engine, with Debian's
// docker-compose (1.29.2): the generated file is brought up as it is, and
// the services' restarts happen in place, unseen by the engine.

// needCompose skips outside CI when docker-compose is missing (setup.sh
// installs it; it needs root) and fails with CI=true.
func needCompose(t *testing.T) {
	t.Helper()
	need(t)
	if _, err := exec.LookPath("docker-compose"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("docker-compose is not installed (test/docker/setup.sh installs it)")
		}
		t.Skipf("docker-compose is not installed (run test/docker/setup.sh as root)")
	}
}

// composeProject is one generated Compose file brought up as its own project.
type composeProject struct {
	t       *testing.T
	file    string // the generated file
	project string
}

// newComposeProject writes input, generates the supervised file with the
// restart-injector built for the suite, and removes the project (its
// containers and volumes) when the test ends.
func newComposeProject(t *testing.T, input string) *composeProject {
	t.Helper()
	dir := t.TempDir()
	in := filepath.Join(dir, "docker-compose.yaml")
	if err := os.WriteFile(in, []byte(input), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &composeProject{t: t, file: filepath.Join(dir, "supervised.yaml"),
		project: fmt.Sprintf("rse2ecompose%d", time.Now().UnixNano()%1e9)}
	out, err := exec.Command(env.injector, "compose", "-f", in, "-o", p.file, "--supervisor-image", supervisorImage).CombinedOutput()
	if err != nil {
		t.Fatalf("restart-injector compose: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			l, _, _ := p.try("logs", "--no-color")
			gen, _ := os.ReadFile(p.file)
			t.Logf("generated file:\n%s\ndocker-compose logs:\n%s", gen, l)
		}
		p.try("down", "-v", "-t", "1")
	})
	return p
}

// try runs docker-compose on the project with a generous deadline and
// returns its stdout and stderr.
func (p *composeProject) try(args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker-compose", append([]string{"--ansi", "never", "-p", p.project, "-f", p.file}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return strings.TrimSpace(stdout.String()), strings.TrimSpace(stderr.String()), err
}

func (p *composeProject) run(args ...string) string {
	p.t.Helper()
	out, errs, err := p.try(args...)
	if err != nil {
		p.t.Fatalf("docker-compose %s: %v\n%s\n%s", strings.Join(args, " "), err, out, errs)
	}
	return out
}

// container returns the id of the service's container.
func (p *composeProject) container(service string) string {
	p.t.Helper()
	id := p.run("ps", "-q", service)
	if id == "" || strings.ContainsAny(id, " \n") {
		p.t.Fatalf("docker-compose ps -q %s printed %q", service, id)
	}
	return id
}

// runs reads how often the service's workload has started, from the data
// volume through the running container via.
func (p *composeProject) runs(via, service string) int {
	p.t.Helper()
	out := dockerExec(p.t, p.container(via), "sh", "-c", "cat /data/runs-"+service+" 2>/dev/null | wc -l")
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		p.t.Fatalf("run count of %s: %q", service, out)
	}
	return n
}

// status runs `restart-supervisor status --json` in the service's container.
func (p *composeProject) status(service string) map[string]containerStatus {
	p.t.Helper()
	out := dockerExec(p.t, p.container(service), supervisorIn, "status", "--json")
	var doc struct{ Containers []containerStatus }
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		p.t.Fatalf("status --json in %s printed %q: %v", service, out, err)
	}
	m := map[string]containerStatus{}
	for _, c := range doc.Containers {
		m[c.Container] = c
	}
	return m
}

// waitFor polls cond until it returns "" (settled) or the time is up, and
// fails with the last reason.
func (p *composeProject) waitFor(what string, cond func() string) {
	p.t.Helper()
	deadline := time.Now().Add(podWait)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: not within %v: %s", what, podWait, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkNoEngineRestart asserts that the engine never restarted the
// service's container: it runs, RestartCount 0, same start as before.
func (p *composeProject) checkNoEngineRestart(service string, before state) {
	p.t.Helper()
	s := inspect(p.t, p.container(service))
	if !s.State.Running || s.RestartCount != 0 || s.State.StartedAt != before.State.StartedAt || s.State.Pid != before.State.Pid {
		p.t.Errorf("%s: running %v, RestartCount %d, StartedAt %s -> %s, Pid %d -> %d; want still the first start, never restarted by the engine",
			service, s.State.Running, s.RestartCount, before.State.StartedAt, s.State.StartedAt, before.State.Pid, s.State.Pid)
	}
}

// The workloads count their runs in a shared data volume; worker's first
// run waits for /data/go, then exits with the given code.
func composeWorkload(name string, exitOnce int) string {
	script := fmt.Sprintf("echo start >> /data/runs-%s; ", name)
	if exitOnce != 0 {
		script += fmt.Sprintf("if [ ! -e /data/marker ]; then touch /data/marker; until [ -e /data/go ]; do sleep 0.05; done; exit %d; fi; ", exitOnce)
	}
	return strconv.Quote(script + "exec sleep 1000")
}

// worker exits 42 once and its Restart rule restarts it in place; web has
// no rules and is written back unchanged, so it does not run under the
// supervisor at all. worker's stop_signal, SIGUSR1, must stop it even
// though its rules restart the code SIGUSR1 ends it with (138).
func TestComposeRestartInPlace(t *testing.T) {
	needCompose(t)
	p := newComposeProject(t, fmt.Sprintf(`services:
  web:
    image: %s
    command: ["sh", "-c", %s]
    volumes:
      - data:/data
  worker:
    image: %s
    command: ["sh", "-c", %s]
    volumes:
      - data:/data
    depends_on:
      - web
    stop_signal: SIGUSR1
    x-restart-rules:
      restartPolicy: Never
      restartPolicyRules:
        - action: Restart
          exitCodes: {operator: In, values: [42, 138]}
volumes:
  data:
`, busyboxImage, composeWorkload("web", 0), busyboxImage, composeWorkload("worker", 42)))
	p.run("up", "-d")
	p.waitFor("both services started", func() string {
		if w, v := p.runs("web", "worker"), p.runs("web", "web"); w != 1 || v != 1 {
			return fmt.Sprintf("worker started %d times, web %d", w, v)
		}
		return ""
	})
	before := map[string]state{"web": inspect(t, p.container("web")), "worker": inspect(t, p.container("worker"))}

	dockerExec(t, p.container("web"), "touch", "/data/go")
	p.waitFor("worker restarted in place", func() string {
		s := p.status("worker")["worker"]
		if n := p.runs("web", "worker"); n != 2 || s.State != "running" || s.Restarts != 1 {
			return fmt.Sprintf("worker started %d times, status %+v", n, s)
		}
		return ""
	})
	p.checkNoEngineRestart("worker", before["worker"])
	p.checkNoEngineRestart("web", before["web"])
	if e := p.status("worker")["worker"].LastRestart; e == nil || e.Code != 42 || e.Rule == nil || *e.Rule != 0 || e.Action != "Restart" {
		t.Errorf("worker: lastRestart %+v, want 42 by rule 0 Restart", e)
	}
	if n := p.runs("worker", "web"); n != 1 {
		t.Errorf("web started %d times, want 1", n)
	}
	if l := p.run("logs", "--no-color", "worker"); strings.Count(l, "restarting in place") != 1 {
		t.Errorf("worker log must show one in-place restart:\n%s", l)
	}
	// web is not wrapped: its own command is PID 1, without the supervisor's environment.
	var web []struct {
		Path   string
		Config struct{ Env []string }
	}
	if err := json.Unmarshal([]byte(run(t, "inspect", p.container("web"))), &web); err != nil || len(web) != 1 {
		t.Fatalf("docker inspect web: %v", err)
	}
	if web[0].Path != "sh" || slices.ContainsFunc(web[0].Config.Env, func(e string) bool { return strings.HasPrefix(e, "RESTART_SUPERVISOR_") }) {
		t.Errorf("web was changed: path %s, env %q", web[0].Path, web[0].Config.Env)
	}
	// The install service ran once and completed.
	if out := p.run("ps", "--all", "restart-supervisor-install"); !strings.Contains(out, "Exit 0") {
		t.Errorf("install service:\n%s", out)
	}

	// docker-compose stop sends SIGUSR1: a stop, forwarded to the
	// workload (138), not an exit the Restart rule would restart. Were it
	// judged by the rules, the workload would run on until the engine's
	// SIGKILL after the timeout (137).
	id := p.container("worker")
	p.run("stop", "-t", "30", "worker")
	if code := waitExit(t, id, time.Minute); code != 138 {
		t.Errorf("worker exit code after docker-compose stop = %d, want 138 (SIGUSR1 forwarded as a stop)", code)
	}
	if l := logs(t, id); !strings.Contains(l, "stop requested") || strings.Count(l, "restarting in place") != 1 {
		t.Errorf("worker log after docker-compose stop:\n%s", l)
	}
}

// worker exits 88 once; its RestartAllContainers rule restarts both
// services together, in place. web has no rules: it is wrapped because the
// file uses RestartAllContainers, and follows the pod restart.
func TestComposeRestartAllContainers(t *testing.T) {
	needCompose(t)
	p := newComposeProject(t, fmt.Sprintf(`services:
  web:
    image: %s
    command: ["sh", "-c", %s]
    volumes:
      - data:/data
  worker:
    image: %s
    command: ["sh", "-c", %s]
    volumes:
      - data:/data
    x-restart-rules:
      restartPolicy: Never
      restartPolicyRules:
        - action: RestartAllContainers
          exitCodes: {operator: In, values: [88]}
volumes:
  data:
`, busyboxImage, composeWorkload("web", 0), busyboxImage, composeWorkload("worker", 88)))
	p.run("up", "-d")
	// Every supervisor joins the pod before it starts its workload: once
	// both workloads ran, both watch for pod restarts.
	p.waitFor("both services started", func() string {
		if w, v := p.runs("web", "worker"), p.runs("web", "web"); w != 1 || v != 1 {
			return fmt.Sprintf("worker started %d times, web %d", w, v)
		}
		return ""
	})
	before := map[string]state{"web": inspect(t, p.container("web")), "worker": inspect(t, p.container("worker"))}

	dockerExec(t, p.container("web"), "touch", "/data/go")
	p.waitFor("both services restarted together once", func() string {
		var bad []string
		for _, via := range []string{"web", "worker"} {
			st := p.status(via)
			for _, name := range []string{"web", "worker"} {
				s := st[name]
				if s.State != "running" || s.Restarts != 1 || s.PodRestarts != 1 || s.Generation != 1 {
					bad = append(bad, fmt.Sprintf("status of %s read in %s: %+v", name, via, s))
				}
			}
		}
		for _, name := range []string{"web", "worker"} {
			if n := p.runs("web", name); n != 2 {
				bad = append(bad, fmt.Sprintf("%s started %d times, want 2", name, n))
			}
		}
		return strings.Join(bad, "; ")
	})
	p.checkNoEngineRestart("worker", before["worker"])
	p.checkNoEngineRestart("web", before["web"])
	st := p.status("web")
	if e := st["worker"].LastRestart; e == nil || e.Code != 88 || e.Action != "RestartAllContainers" {
		t.Errorf("worker: lastRestart %+v, want 88 RestartAllContainers", e)
	}
	checkPodRestartKill(t, "web", st["web"].LastRestart)
	var gens []string
	for _, g := range strings.Fields(dockerExec(t, p.container("worker"), "ls", podStateMount+"/pod-restarts")) {
		if !strings.Contains(g, ".") {
			gens = append(gens, g)
		}
	}
	if !slices.Equal(gens, []string{"00000000000000000001"}) {
		t.Errorf("pod restart generations = %q, want only 00000000000000000001", gens)
	}
}

// Real docker-compose accepts every generated golden of compose/testdata.
func TestComposeGoldensAccepted(t *testing.T) {
	needCompose(t)
	files, err := filepath.Glob(filepath.Join(env.root, "compose/testdata/out/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no goldens: %v", err)
	}
	for _, f := range files {
		if out, err := exec.Command("docker-compose", "-f", f, "config", "-q").CombinedOutput(); err != nil {
			t.Errorf("docker-compose config %s: %v\n%s", f, err, out)
		}
	}
}
