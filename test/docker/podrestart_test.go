package docker

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The KEP-5532 end-to-end scenarios (RestartAllContainers) on a real
// engine: each "pod" is a set of containers that share a Docker volume as
// the pod's state directory, as the injector's restart-supervisor-state
// emptyDir is shared in Kubernetes, and a second volume standing for an
// ordinary emptyDir. Every container runs the bind-mounted supervisor as
// PID 1. The workloads count their runs in the second volume, so the
// counts also prove that a pod restart keeps the pod's volumes.

const (
	podStateMount = "/run/restart-supervisor"
	podDataMount  = "/data"
	supervisorIn  = "/opt/restart-supervisor/restart-supervisor"
	// podWait is how long a pod gets to reach an observable state; pod
	// restarts take milliseconds, the margin is for a loaded machine.
	podWait = time.Minute
)

// dockerPod is a group of containers sharing a state volume and a data
// volume.
type dockerPod struct {
	t           *testing.T
	state, data string            // volume names
	containers  map[string]string // member name -> docker container name
	order       []string
}

func newDockerPod(t *testing.T) *dockerPod {
	t.Helper()
	p := &dockerPod{t: t, containers: map[string]string{}}
	stamp := time.Now().UnixNano() % 1e9
	for _, v := range []*string{&p.state, &p.data} {
		kind := "state"
		if v == &p.data {
			kind = "data"
		}
		name := fmt.Sprintf("rs-e2e-pod-%s-%d", kind, stamp)
		run(t, "volume", "create", "--label", containerLabel, name)
		// Registered before any container's cleanup, so it runs after the
		// containers are removed (t.Cleanup is last in, first out).
		t.Cleanup(func() { exec.Command("docker", "volume", "rm", "-f", name).Run() })
		*v = name
	}
	return p
}

// start runs one member of the pod: the workload script under the
// supervisor, with the pod's state directory and container name in the
// environment as the injector sets them, and the termination message
// written to the data volume so that it outlives the container (Docker has
// no terminationMessagePath of its own).
func (p *dockerPod) start(name, rulesDoc, script string) {
	t := p.t
	t.Helper()
	args := dockerArgs(t, busyboxImage, rulesDoc, "sh", "-c", script)
	img := slices.Index(args, busyboxImage)
	if img < 0 || img+1 >= len(args) || args[img+1] != "--" {
		t.Fatalf("docker-args printed %q: want IMAGE followed by --", args)
	}
	args = slices.Insert(args, img+1, "--termination-message-path", podDataMount+"/termination-"+name)
	opts := []string{
		"-v", p.state + ":" + podStateMount,
		"-v", p.data + ":" + podDataMount,
		"-e", "RESTART_SUPERVISOR_STATE_DIR=" + podStateMount,
		"-e", "RESTART_SUPERVISOR_CONTAINER_NAME=" + name,
	}
	p.containers[name] = startContainer(t, append(opts, args...)...)
	p.order = append(p.order, name)
}

// counted prefixes a workload script: each run appends a line to
// /data/runs-NAME and keeps its number in $n.
func counted(name, rest string) string {
	f := podDataMount + "/runs-" + name
	return fmt.Sprintf(`echo start >> %s; n=$(wc -l < %s); echo "%s: run $n"; %s`, f, f, name, rest)
}

// triggered makes run number `at` of the workload wait until the test
// creates /data/go-NAME-AT, then exit with code: the test decides when the
// exit happens, after it has seen every container of the pod running.
func triggered(name string, at, code int) string {
	return fmt.Sprintf(`if [ $n -eq %d ]; then until [ -e %s/go-%s-%d ]; do sleep 0.05; done; exit %d; fi; `,
		at, podDataMount, name, at, code)
}

func (p *dockerPod) trigger(name string, at int) {
	p.t.Helper()
	dockerExec(p.t, p.containers[name], "touch", fmt.Sprintf("%s/go-%s-%d", podDataMount, name, at))
}

// runs reads how often the member's workload has started, through a
// running container of the pod.
func (p *dockerPod) runs(via, name string) int {
	p.t.Helper()
	out := dockerExec(p.t, p.containers[via], "sh", "-c", "cat "+podDataMount+"/runs-"+name+" 2>/dev/null | wc -l")
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		p.t.Fatalf("run count of %s: %q", name, out)
	}
	return n
}

// readVolume reads a file from one of the pod's volumes after its
// containers have stopped, with a throwaway container.
func readVolume(t *testing.T, vol, path string) string {
	t.Helper()
	return run(t, "run", "--rm", "--label", containerLabel, "-v", vol+":/v:ro", "--entrypoint", "cat", busyboxImage, "/v/"+path)
}

// The status document fields the tests look at, under the names that
// docs/pod-level.md gives them.
type statusExit struct {
	Code       int    `json:"code"`
	Signal     string `json:"signal"`
	Rule       *int   `json:"rule"`
	Action     string `json:"action"`
	PodRestart uint64 `json:"podRestart"`
}

type containerStatus struct {
	Container   string      `json:"container"`
	State       string      `json:"state"`
	Restarts    int         `json:"restarts"`
	PodRestarts int         `json:"podRestarts"`
	Generation  uint64      `json:"generation"`
	LastExit    *statusExit `json:"lastExit"`
	LastRestart *statusExit `json:"lastRestart"`
}

// status runs `restart-supervisor status --json` inside a container of the
// pod, as `kubectl exec` would, and returns the documents by container.
func (p *dockerPod) status(via string) map[string]containerStatus {
	p.t.Helper()
	out := dockerExec(p.t, p.containers[via], supervisorIn, "status", "--json")
	var doc struct{ Containers []containerStatus }
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		p.t.Fatalf("status --json in %s printed %q: %v", via, out, err)
	}
	m := map[string]containerStatus{}
	for _, c := range doc.Containers {
		m[c.Container] = c
	}
	return m
}

// generations lists the pod restart generations in the state volume.
func (p *dockerPod) generations(via string) []string {
	p.t.Helper()
	var out []string
	for _, name := range strings.Fields(dockerExec(p.t, p.containers[via], "ls", podStateMount+"/pod-restarts")) {
		// Round markers (<generation>.stopped.<container>) are not
		// generations.
		if !strings.Contains(name, ".") {
			out = append(out, name)
		}
	}
	return out
}

// want is what a member should show once the pod has settled.
type want struct {
	runs, restarts, podRestarts int
	generation                  uint64
}

// settle waits until every member has started `runs` times and the status
// documents, read in each container of the pod, agree with want and show
// the workloads running. Status documents are written off the restart
// path, so they may lag the runs by a moment.
func (p *dockerPod) settle(wants map[string]want) {
	t := p.t
	t.Helper()
	deadline := time.Now().Add(podWait)
	for {
		// A container that ended cannot settle; say so instead of failing
		// on the docker exec below.
		for name, s := range p.inspectAll() {
			if !s.State.Running {
				t.Fatalf("container %s is %s (exit code %d) before the pod settled", name, s.State.Status, s.State.ExitCode)
			}
		}
		var bad []string
		for _, name := range p.order {
			if n := p.runs(p.order[0], name); n != wants[name].runs {
				bad = append(bad, fmt.Sprintf("%s started %d times, want %d", name, n, wants[name].runs))
			}
		}
		for _, via := range p.order {
			st := p.status(via)
			for _, name := range p.order {
				w := wants[name]
				s, ok := st[name]
				switch {
				case !ok:
					bad = append(bad, fmt.Sprintf("status in %s does not list %s", via, name))
				case s.State != "running" || s.Restarts != w.restarts || s.PodRestarts != w.podRestarts || s.Generation != w.generation:
					bad = append(bad, fmt.Sprintf("status of %s read in %s: %s, restarts %d, podRestarts %d, generation %d; want running, %d, %d, %d",
						name, via, s.State, s.Restarts, s.PodRestarts, s.Generation, w.restarts, w.podRestarts, w.generation))
				}
			}
			if len(st) != len(p.order) {
				bad = append(bad, fmt.Sprintf("status in %s lists %d containers, want %d", via, len(st), len(p.order)))
			}
		}
		if len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod did not settle within %v:\n  %s", podWait, strings.Join(bad, "\n  "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// inspectAll returns docker inspect of every member.
func (p *dockerPod) inspectAll() map[string]state {
	p.t.Helper()
	m := map[string]state{}
	for _, name := range p.order {
		m[name] = inspect(p.t, p.containers[name])
	}
	return m
}

// checkInPlace asserts that Docker saw no restart: every container still
// runs the process it started with.
func (p *dockerPod) checkInPlace(before map[string]state) {
	t := p.t
	t.Helper()
	for name, after := range p.inspectAll() {
		b := before[name]
		if !after.State.Running {
			t.Errorf("container %s is %s, want running", name, after.State.Status)
		}
		if after.RestartCount != 0 {
			t.Errorf("container %s: docker RestartCount = %d, want 0", name, after.RestartCount)
		}
		if after.State.StartedAt != b.State.StartedAt || after.State.Pid != b.State.Pid {
			t.Errorf("container %s was started again by Docker: StartedAt %s -> %s, Pid %d -> %d",
				name, b.State.StartedAt, after.State.StartedAt, b.State.Pid, after.State.Pid)
		}
	}
}

// stopAll stops the pod with docker stop and asserts that each container
// ended by the forwarded SIGTERM (143), not by Docker's SIGKILL. After it,
// no restart can happen any more, so counts read afterwards are final.
func (p *dockerPod) stopAll() {
	t := p.t
	t.Helper()
	for _, name := range p.order {
		run(t, "stop", "-t", strconv.Itoa(stopTimeout), p.containers[name])
		if code := waitExit(t, p.containers[name], time.Minute); code != 143 {
			t.Errorf("container %s exit code = %d after docker stop, want 143", name, code)
		}
	}
}

// checkFinal reads the run counts and the final status documents from the
// volumes of the stopped pod: each member started exactly `runs` times.
func (p *dockerPod) checkFinal(wants map[string]want) map[string]containerStatus {
	t := p.t
	t.Helper()
	final := map[string]containerStatus{}
	for _, name := range p.order {
		w := wants[name]
		if n := strings.Count(readVolume(t, p.data, "runs-"+name), "start"); n != w.runs {
			t.Errorf("%s started %d times in all, want %d", name, n, w.runs)
		}
		var s containerStatus
		doc := readVolume(t, p.state, "status/"+name+".json")
		if err := json.Unmarshal([]byte(doc), &s); err != nil {
			t.Fatalf("final status document of %s %q: %v", name, doc, err)
		}
		if s.State != "exited" || s.Restarts != w.restarts || s.PodRestarts != w.podRestarts || s.Generation != w.generation {
			t.Errorf("final status of %s: %s, restarts %d, podRestarts %d, generation %d; want exited, %d, %d, %d",
				name, s.State, s.Restarts, s.PodRestarts, s.Generation, w.restarts, w.podRestarts, w.generation)
		}
		final[name] = s
	}
	return final
}

// checkPodRestartKill asserts what the status shows for a workload that a
// pod restart stopped: SIGTERM (the stop signal; these workloads do not
// handle it), not judged by the rules.
func checkPodRestartKill(t *testing.T, name string, e *statusExit) {
	t.Helper()
	if e == nil {
		t.Errorf("%s: no lastRestart in its status", name)
		return
	}
	if e.Code != 143 || e.Signal != "SIGTERM" || e.Rule != nil || e.Action != "" || e.PodRestart == 0 {
		t.Errorf("%s: lastRestart %+v, want 143 SIGTERM marked with its pod restart and no rule (a pod restart's stop is not judged by the rules)", name, *e)
	}
}

const (
	// The pod's own restartPolicy: Docker restarts nothing (--restart no).
	podNever = "podRestartPolicy: Never\n"

	restartAllOn42 = `restartPolicy: Never
restartPolicyRules:
- action: RestartAllContainers
  exitCodes: {operator: In, values: [42]}
podRestartPolicy: Never
`
)

// A regular container exits 42 once; its rule restarts the whole pod. The
// other container has no rules of its own and follows the pod's restart.
func TestPodRestartFromRegularContainer(t *testing.T) {
	need(t)
	p := newDockerPod(t)
	p.start("a", restartAllOn42, counted("a", triggered("a", 1, 42)+"exec sleep 1000"))
	p.start("b", podNever, counted("b", "exec sleep 1000"))

	// Every supervisor joins the pod before it starts its workload, so
	// once both ran, both watch for pod restarts.
	p.settle(map[string]want{"a": {runs: 1}, "b": {runs: 1}})
	if g := p.generations("b"); len(g) != 0 {
		t.Fatalf("pod restart generations before any exit: %q", g)
	}
	before := p.inspectAll()

	p.trigger("a", 1)
	p.settle(map[string]want{
		"a": {runs: 2, restarts: 1, podRestarts: 1, generation: 1},
		"b": {runs: 2, restarts: 1, podRestarts: 1, generation: 1},
	})
	p.checkInPlace(before)
	if g := p.generations("a"); !slices.Equal(g, []string{"00000000000000000001"}) {
		t.Errorf("pod restart generations = %q, want only 00000000000000000001", g)
	}
	st := p.status("b")
	if e := st["a"].LastRestart; e == nil || e.Code != 42 || e.Rule == nil || *e.Rule != 0 || e.Action != "RestartAllContainers" {
		t.Errorf("a: lastRestart %+v, want 42 by rule 0 RestartAllContainers", e)
	}
	checkPodRestartKill(t, "b", st["b"].LastRestart)
	if l := logs(t, p.containers["a"]); strings.Count(l, "pod restart announced") != 1 || !strings.Contains(l, "announcedHere=true") {
		t.Errorf("a must announce generation 1 once; log:\n%s", l)
	}
	if l := logs(t, p.containers["b"]); strings.Count(l, "workload stopped for a pod restart") != 1 {
		t.Errorf("b must be stopped for the pod restart once; log:\n%s", l)
	}

	// Stop a first: b keeps running, and a's final document and
	// termination message are readable from b, as through kubectl exec.
	run(t, "stop", "-t", strconv.Itoa(stopTimeout), p.containers["a"])
	if code := waitExit(t, p.containers["a"], time.Minute); code != 143 {
		t.Errorf("a exit code = %d after docker stop, want 143", code)
	}
	st = p.status("b")
	if s := st["a"]; s.State != "exited" || s.Restarts != 1 || s.PodRestarts != 1 {
		t.Errorf("status of a after its stop, read in b: %+v", s)
	}
	if s := st["b"]; s.State != "running" || s.Restarts != 1 {
		t.Errorf("stopping a changed b: %+v", s)
	}
	term := dockerExec(t, p.containers["b"], "cat", podDataMount+"/termination-a")
	if wantTerm := "restart-supervisor: 1 in-place restart (1 pod restart); last exit 42 (rule 0 RestartAllContainers); final exit 143 (SIGTERM)"; term != wantTerm {
		t.Errorf("termination message of a = %q, want %q", term, wantTerm)
	}

	p.stopAll()
	p.checkFinal(map[string]want{
		"a": {runs: 2, restarts: 1, podRestarts: 1, generation: 1},
		"b": {runs: 2, restarts: 1, podRestarts: 1, generation: 1},
	})
	termB := readVolume(t, p.data, "termination-b")
	if !strings.HasPrefix(termB, "restart-supervisor: 1 in-place restart (1 pod restart); last exit 143 (SIGTERM, pod restart 1)") ||
		!strings.HasSuffix(termB, "; final exit 143 (SIGTERM)") {
		t.Errorf("termination message of b = %q", termB)
	}
}

// Two containers carry RestartAllContainers; the source exits 42 once. The
// other one's rule also matches 143, the code its workload gets from the
// pod restart's SIGTERM: a supervisor that judged that stop by the rules
// would announce again and loop. A third container has no rules.
func TestPodRestartTwoContainersWithTheRule(t *testing.T) {
	need(t)
	p := newDockerPod(t)
	p.start("a", restartAllOn42, counted("a", triggered("a", 1, 42)+"exec sleep 1000"))
	p.start("b", `restartPolicy: Never
restartPolicyRules:
- action: RestartAllContainers
  exitCodes: {operator: In, values: [42, 143]}
podRestartPolicy: Never
`, counted("b", "exec sleep 1000"))
	p.start("c", podNever, counted("c", "exec sleep 1000"))

	p.settle(map[string]want{"a": {runs: 1}, "b": {runs: 1}, "c": {runs: 1}})
	before := p.inspectAll()
	p.trigger("a", 1)
	once := want{runs: 2, restarts: 1, podRestarts: 1, generation: 1}
	p.settle(map[string]want{"a": once, "b": once, "c": once})
	p.checkInPlace(before)
	// b restarted (its run 2 is counted) only after handling its kill, so
	// an announcement caused by that kill would be here by now.
	if g := p.generations("c"); !slices.Equal(g, []string{"00000000000000000001"}) {
		t.Errorf("pod restart generations = %q, want only 00000000000000000001", g)
	}
	st := p.status("c")
	checkPodRestartKill(t, "b", st["b"].LastRestart)
	checkPodRestartKill(t, "c", st["c"].LastRestart)
	if l := logs(t, p.containers["b"]); strings.Contains(l, "pod restart announced") {
		t.Errorf("b announced a pod restart:\n%s", l)
	}

	p.stopAll()
	p.checkFinal(map[string]want{"a": once, "b": once, "c": once})
}

// A container is restarted alone after exit 1 (by a Restart rule, or by
// its restartPolicy), and later restarts the whole pod with exit 42.
func TestPodRestartAfterOwnRestart(t *testing.T) {
	need(t)
	for _, tc := range []struct{ name, rules string }{
		{"Restart rule", `restartPolicy: Never
restartPolicyRules:
- action: Restart
  exitCodes: {operator: In, values: [1]}
- action: RestartAllContainers
  exitCodes: {operator: In, values: [42]}
podRestartPolicy: Never
backoff: {initial: 1s}
`},
		{"container restartPolicy", `restartPolicy: Always
restartPolicyRules:
- action: RestartAllContainers
  exitCodes: {operator: In, values: [42]}
podRestartPolicy: Never
backoff: {initial: 1s}
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newDockerPod(t)
			p.start("a", tc.rules, counted("a", triggered("a", 1, 1)+triggered("a", 2, 42)+"exec sleep 1000"))
			p.start("b", podNever, counted("b", "exec sleep 1000"))
			p.settle(map[string]want{"a": {runs: 1}, "b": {runs: 1}})
			before := p.inspectAll()

			p.trigger("a", 1)
			p.settle(map[string]want{"a": {runs: 2, restarts: 1}, "b": {runs: 1}})
			// a announces before it starts again, so an announcement
			// caused by exit 1 would be here by now.
			if g := p.generations("b"); len(g) != 0 {
				t.Fatalf("exit 1 made pod restart generations %q", g)
			}
			if e := p.status("b")["a"].LastRestart; e == nil || e.Code != 1 || e.Action == "RestartAllContainers" {
				t.Errorf("a: lastRestart %+v, want exit 1 restarted alone", e)
			}

			p.trigger("a", 2)
			p.settle(map[string]want{
				"a": {runs: 3, restarts: 2, podRestarts: 1, generation: 1},
				"b": {runs: 2, restarts: 1, podRestarts: 1, generation: 1},
			})
			p.checkInPlace(before)
			if g := p.generations("b"); !slices.Equal(g, []string{"00000000000000000001"}) {
				t.Errorf("pod restart generations = %q, want only 00000000000000000001", g)
			}
			st := p.status("a")
			if e := st["a"].LastRestart; e == nil || e.Code != 42 || e.Action != "RestartAllContainers" {
				t.Errorf("a: lastRestart %+v, want 42 RestartAllContainers", e)
			}
			checkPodRestartKill(t, "b", st["b"].LastRestart)

			p.stopAll()
			p.checkFinal(map[string]want{
				"a": {runs: 3, restarts: 2, podRestarts: 1, generation: 1},
				"b": {runs: 2, restarts: 1, podRestarts: 1, generation: 1},
			})
		})
	}
}
