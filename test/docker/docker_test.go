package docker

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// counter makes each run of the workload print and keep its run number in
// the container's filesystem, which survives an in-place restart.
const counter = `n=$(cat /tmp/runs 2>/dev/null || echo 0); n=$((n+1)); echo $n > /tmp/runs; echo "run $n"; `

const rules42 = `
restartPolicy: Never
restartPolicyRules:
- action: Restart
  exitCodes: {operator: In, values: [42]}
backoff: {initial: 0s}
`

// restartLine is what the supervisor logs for each restart in place.
const restartLine = "restarting in place"

// stopTimeout is the -t given to docker stop: far above what a forwarded
// SIGTERM needs, so a stop that took it all would mean Docker had to
// SIGKILL.
const stopTimeout = 60

func TestRestartInPlaceOnExit42(t *testing.T) {
	need(t)
	c := startContainer(t, dockerArgs(t, busyboxImage, rules42, "sh", "-c",
		counter+`if [ $n -le 2 ]; then sleep 1; exit 42; fi; echo steady; exec sleep 1000`)...)
	waitLog(t, c, "run 1", 30*time.Second)
	before := inspect(t, c)
	l := waitLog(t, c, "steady", 30*time.Second)
	after := inspect(t, c)

	if !after.State.Running {
		t.Fatalf("container is %s after the restarts, want running", after.State.Status)
	}
	if after.RestartCount != 0 {
		t.Errorf("docker RestartCount = %d, want 0: restarts happened inside the container", after.RestartCount)
	}
	if after.State.StartedAt != before.State.StartedAt || after.State.Pid != before.State.Pid {
		t.Errorf("container was started again: StartedAt %s -> %s, Pid %d -> %d",
			before.State.StartedAt, after.State.StartedAt, before.State.Pid, after.State.Pid)
	}
	for _, want := range []string{"run 1", "run 2", "run 3", "exitCode=42", "restarts=2"} {
		if !strings.Contains(l, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if got := strings.Count(l, restartLine); got != 2 {
		t.Errorf("log has %d %q lines, want 2:\n%s", got, restartLine, l)
	}
}

func TestExit1EndsTheContainer(t *testing.T) {
	need(t)
	c := startContainer(t, dockerArgs(t, busyboxImage, rules42, "sh", "-c", counter+"exit 1")...)
	if code := waitExit(t, c, time.Minute); code != 1 {
		t.Errorf("container exit code = %d, want 1", code)
	}
	l := logs(t, c)
	if !strings.Contains(l, "run 1") || strings.Contains(l, "run 2") || strings.Contains(l, restartLine) {
		t.Errorf("exit 1 must not restart; log:\n%s", l)
	}
	if rc := inspect(t, c).RestartCount; rc != 0 {
		t.Errorf("RestartCount = %d", rc)
	}
}

func TestNotInRule(t *testing.T) {
	need(t)
	rules := `
restartPolicy: Never
restartPolicyRules:
- action: Restart
  exitCodes: {operator: NotIn, values: [0, 3]}
backoff: {initial: 0s}
`
	c := startContainer(t, dockerArgs(t, busyboxImage, rules, "sh", "-c",
		counter+`case $n in 1) exit 7;; 2) exit 9;; *) exit 3;; esac`)...)
	if code := waitExit(t, c, time.Minute); code != 3 {
		t.Errorf("container exit code = %d, want 3 (in the NotIn list, so not restarted)", code)
	}
	l := logs(t, c)
	if got := strings.Count(l, restartLine); got != 2 || !strings.Contains(l, "run 3") || strings.Contains(l, "run 4") {
		t.Errorf("want exits 7 and 9 restarted, 3 final; %d restarts, log:\n%s", got, l)
	}
}

// stop runs `docker stop` and returns how long it took.
func stop(t *testing.T, c string) time.Duration {
	t.Helper()
	start := time.Now()
	run(t, "stop", "-t", strconv.Itoa(stopTimeout), c)
	return time.Since(start)
}

// checkStopped asserts that the container ended by the forwarded signal (or
// the workload's own handler), not by Docker's SIGKILL after the timeout.
func checkStopped(t *testing.T, c string, took time.Duration, wantCode int) {
	t.Helper()
	code := waitExit(t, c, time.Minute)
	if code == 137 {
		t.Errorf("exit code 137: Docker had to SIGKILL the container; the stop signal was not handled")
	} else if code != wantCode {
		t.Errorf("exit code = %d, want %d", code, wantCode)
	}
	if took >= stopTimeout/2*time.Second {
		t.Errorf("docker stop took %v, close to its -t %ds", took, stopTimeout)
	}
	t.Logf("docker stop returned after %v, exit code %d", took.Round(time.Millisecond), code)
}

// Under restartPolicy Always every exit restarts, so a stop that restarted
// the workload would show as a second run.
const rulesAlways = "restartPolicy: Always\nbackoff: {initial: 0s}\n"

func TestStopWhileRunning(t *testing.T) {
	need(t)
	t.Run("default SIGTERM action", func(t *testing.T) {
		c := startContainer(t, dockerArgs(t, busyboxImage, rulesAlways, "sh", "-c", counter+"exec sleep 1000")...)
		waitLog(t, c, "run 1", 30*time.Second)
		took := stop(t, c)
		checkStopped(t, c, took, 143)
		if l := logs(t, c); strings.Contains(l, "run 2") || strings.Contains(l, restartLine) {
			t.Errorf("docker stop restarted the workload:\n%s", l)
		}
	})
	t.Run("workload's own exit code", func(t *testing.T) {
		c := startContainer(t, dockerArgs(t, busyboxImage, rulesAlways, "sh", "-c",
			counter+`trap 'echo cleaning up; exit 7' TERM; echo ready; while :; do sleep 1; done`)...)
		waitLog(t, c, "ready", 30*time.Second)
		took := stop(t, c)
		checkStopped(t, c, took, 7)
		l := logs(t, c)
		if !strings.Contains(l, "cleaning up") || strings.Contains(l, "run 2") {
			t.Errorf("want the TERM handler to run once and no restart; log:\n%s", l)
		}
	})
}

// A workload that ignores SIGTERM is SIGKILLed by the supervisor after its
// grace period, which docker-args --grace-period puts below docker stop's
// timeout: the stop ends then, not when Docker gives up.
func TestStopGracePeriodBelowDockerTimeout(t *testing.T) {
	need(t)
	c := startContainer(t, dockerArgsWith(t, []string{"--grace-period", "2s"}, busyboxImage, rulesAlways, "sh", "-c",
		counter+`trap '' TERM; echo ignoring TERM; while :; do sleep 0.1; done`)...)
	waitLog(t, c, "ignoring TERM", 30*time.Second)
	took := stop(t, c)
	code := waitExit(t, c, time.Minute)
	if took >= stopTimeout/2*time.Second {
		t.Errorf("docker stop took %v: the supervisor's 2s grace period did not end the workload", took)
	}
	if took < 2*time.Second {
		t.Errorf("docker stop took %v, less than the 2s grace period the workload was owed", took)
	}
	if code != 137 {
		t.Errorf("exit code %d, want 137 (workload SIGKILLed after the grace period)", code)
	}
	if l := logs(t, c); strings.Contains(l, "run 2") {
		t.Errorf("restarted after the stop:\n%s", l)
	}
	t.Logf("docker stop -t %d returned after %v, exit code %d", stopTimeout, took.Round(time.Millisecond), code)
}

func TestStopDuringBackoff(t *testing.T) {
	need(t)
	rules := "restartPolicy: Always\nbackoff: {initial: 5m, max: 5m}\n"
	// The first restart is immediate; the second run's exit starts a 5m wait.
	c := startContainer(t, dockerArgs(t, busyboxImage, rules, "sh", "-c", counter+"exit 1")...)
	waitLog(t, c, "delay=5m0s", 30*time.Second)
	if !inspect(t, c).State.Running {
		t.Fatal("container is not running during the backoff")
	}
	took := stop(t, c)
	code := waitExit(t, c, time.Minute)
	if code == 137 || took >= stopTimeout/2*time.Second {
		t.Errorf("stop during backoff: exit code %d after %v; want a prompt exit without SIGKILL", code, took)
	}
	// No workload runs during the backoff: the container ends with the
	// last run's status.
	if code != 1 {
		t.Errorf("exit code = %d, want 1 (the status of the last run)", code)
	}
	if l := logs(t, c); strings.Contains(l, "run 3") {
		t.Errorf("the workload was started again after the stop:\n%s", l)
	}
	t.Logf("docker stop during backoff returned after %v, exit code %d", took.Round(time.Millisecond), code)
}

func TestKillSignalIsForwarded(t *testing.T) {
	need(t)
	c := startContainer(t, dockerArgs(t, busyboxImage, rulesAlways, "sh", "-c",
		counter+`trap 'echo got USR1' USR1; trap 'echo got HUP; exit 5' HUP; echo ready; while :; do sleep 0.2; done`)...)
	waitLog(t, c, "ready", 30*time.Second)
	run(t, "kill", "-s", "USR1", c)
	waitLog(t, c, "got USR1", 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	if s := inspect(t, c); !s.State.Running {
		t.Fatalf("container stopped after USR1: %s", s.State.Status)
	}
	// HUP is forwarded, not a stop: the workload's exit 5 is restarted
	// under restartPolicy Always.
	run(t, "kill", "-s", "HUP", c)
	l := waitLog(t, c, "run 2", 30*time.Second)
	if !strings.Contains(l, "got HUP") || !strings.Contains(l, "exitCode=5") {
		t.Errorf("want the HUP handler's exit 5 restarted; log:\n%s", l)
	}
	run(t, "kill", "-s", "TERM", c)
	if code := waitExit(t, c, time.Minute); code != 143 {
		t.Errorf("after docker kill -s TERM: exit code %d, want 143", code)
	}
}

// proc is one line of /proc/PID/stat inside the container.
type proc struct {
	pid, ppid, pgrp, tpgid int
	comm, state            string
}

// procs reads every process of the container from its own /proc.
func procs(t *testing.T, c string) []proc {
	t.Helper()
	out := dockerExec(t, c, "sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null; true")
	var ps []proc
	for _, line := range strings.Split(out, "\n") {
		open, close := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(line[close+1:])
		if len(f) < 6 {
			continue
		}
		var p proc
		p.pid, _ = strconv.Atoi(strings.TrimSpace(line[:open]))
		p.comm, p.state = line[open+1:close], f[0]
		p.ppid, _ = strconv.Atoi(f[1])
		p.pgrp, _ = strconv.Atoi(f[2])
		p.tpgid, _ = strconv.Atoi(f[5])
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		t.Fatalf("no processes read from /proc in %s:\n%s", c, out)
	}
	return ps
}

func TestOrphansAreReaped(t *testing.T) {
	need(t)
	const orphans = 100
	// Each (sleep &) subshell exits at once, so its sleep is re-parented to
	// PID 1; the workload itself never waits for them. They live 10s, long
	// enough to be seen adopted on a slow machine.
	c := startContainer(t, dockerArgs(t, busyboxImage, rules42, "sh", "-c",
		`i=0; while [ $i -lt `+strconv.Itoa(orphans)+` ]; do (sleep 10 &); i=$((i+1)); done; echo spawned; exec sleep 1000`)...)
	waitLog(t, c, "spawned", 30*time.Second)
	adopted := 0
	for _, p := range procs(t, c) {
		if p.comm == "sleep" && p.ppid == 1 && p.state != "Z" {
			adopted++
		}
	}
	if adopted < orphans {
		t.Fatalf("only %d orphaned sleeps are children of PID 1, want %d: the test did not create orphans", adopted, orphans)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var zombies, sleeps []proc
		for _, p := range procs(t, c) {
			if p.state == "Z" {
				zombies = append(zombies, p)
			}
			if p.comm == "sleep" {
				sleeps = append(sleeps, p)
			}
		}
		if len(zombies) == 0 && len(sleeps) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d zombies (<defunct>) and %d sleeps left 50s after the orphans exited: %v", len(zombies), len(sleeps), zombies)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if top := run(t, "top", c); strings.Contains(top, "defunct") {
		t.Errorf("docker top shows defunct processes:\n%s", top)
	}
}

func TestSupervisorIsPID1(t *testing.T) {
	need(t)
	c := startContainer(t, dockerArgs(t, busyboxImage, rules42, "sh", "-c", `echo $$ > /tmp/workload.pid; echo ready; exec sleep 1000`)...)
	waitLog(t, c, "ready", 30*time.Second)
	cmdline := strings.Split(dockerExec(t, c, "cat", "/proc/1/cmdline"), "\x00")
	if cmdline[0] != "/opt/restart-supervisor/restart-supervisor" {
		t.Errorf("PID 1 runs %q, want the supervisor", cmdline)
	}
	wpid, err := strconv.Atoi(dockerExec(t, c, "cat", "/tmp/workload.pid"))
	if err != nil {
		t.Fatal(err)
	}
	if wpid == 1 {
		t.Fatal("the workload is PID 1")
	}
	var found bool
	for _, p := range procs(t, c) {
		if p.pid == wpid {
			found = true
			if p.comm != "sleep" || p.ppid != 1 {
				t.Errorf("workload pid %d: comm %q ppid %d, want sleep, child of PID 1", wpid, p.comm, p.ppid)
			}
			if p.pgrp == 1 {
				t.Errorf("workload shares PID 1's process group; group signals would hit the supervisor")
			}
		}
	}
	if !found {
		t.Errorf("workload pid %d not found", wpid)
	}
}

func TestSupervisorImage(t *testing.T) {
	need(t)
	var img []struct {
		Config struct {
			User       string
			Entrypoint []string
		}
		RootFS struct{ Layers []string }
	}
	if err := json.Unmarshal([]byte(run(t, "image", "inspect", supervisorImage)), &img); err != nil || len(img) != 1 {
		t.Fatalf("image inspect: %v", err)
	}
	if cfg := img[0].Config; cfg.User != "65532:65532" || strings.Join(cfg.Entrypoint, " ") != "/restart-supervisor" {
		t.Errorf("image config: User %q Entrypoint %q", cfg.User, cfg.Entrypoint)
	}
	if n := len(img[0].RootFS.Layers); n != 1 {
		t.Errorf("image has %d layers, want one: the two binaries", n)
	}
	if out := run(t, "run", "--rm", supervisorImage, "version"); out == "" {
		t.Error("version printed nothing")
	}
	// restart-probe sits next to the supervisor: usage on stderr, exit 2.
	if out, err := exec.Command("docker", "run", "--rm", "--entrypoint", "/restart-probe", supervisorImage).CombinedOutput(); !strings.Contains(string(out), "usage: restart-probe") {
		t.Errorf("/restart-probe in the image: %v %s", err, out)
	}

	// The image's install subcommand fills a volume that other containers
	// mount read-only: the Kubernetes init-container pattern, in Docker.
	vol := "rs-e2e-bin-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	run(t, "volume", "create", vol)
	t.Cleanup(func() { exec.Command("docker", "volume", "rm", "-f", vol).Run() })
	run(t, "run", "--rm", "--user", "0", "-v", vol+":/opt/restart-supervisor", supervisorImage, "install", "/opt/restart-supervisor")

	out, err := exec.Command(env.injector, "docker-args", busyboxImage, "--volume", vol, "--format", "json", "--", "sh", "-c", counter+"[ $n -le 1 ] && exit 42; exit 0").Output()
	if err != nil {
		t.Fatalf("docker-args --volume: %v %s", err, stderrOf(err))
	}
	var argv []string
	json.Unmarshal(out, &argv)
	// No rules: the supervisor's defaults hand every exit over, so this
	// checks only that the installed binary runs.
	c := startContainer(t, argv...)
	if code := waitExit(t, c, time.Minute); code != 42 {
		t.Errorf("exit code %d, want 42 (no rules, no restart)", code)
	}
}

func TestFromYourImagePattern(t *testing.T) {
	need(t)
	dir := t.TempDir()
	dockerfile := `FROM ` + busyboxImage + `
COPY --from=` + supervisorImage + ` /restart-supervisor /restart-supervisor
ENV RESTART_SUPERVISOR_CONFIG='{"restartPolicy":"Never","podRestartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}],"backoff":{"initial":"0s"}}'
ENTRYPOINT ["/restart-supervisor", "--", "/bin/sh", "-c"]
CMD ["` + strings.ReplaceAll(counter, `"`, `\"`) + `[ $n -le 2 ] && exit 42; echo done; exit 0"]
`
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	image := "restart-supervisor-e2e/from-your-image:test"
	if out, err := dockerBuild(filepath.Join(dir, "Dockerfile"), dir, "-t", image); err != nil {
		t.Fatalf("docker build:\n%s\n%v\n%s", dockerfile, err, out)
	}
	c := startContainer(t, image)
	if code := waitExit(t, c, time.Minute); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	l := logs(t, c)
	if strings.Count(l, restartLine) != 2 || !strings.Contains(l, "done") {
		t.Errorf("want two restarts in place, then done; log:\n%s", l)
	}
}

// The shell line docker-args prints by default, pasted into a shell as the
// docs show, for an image with both ENTRYPOINT and CMD that need quoting.
func TestDockerArgsShellLine(t *testing.T) {
	need(t)
	dir := t.TempDir()
	image := "restart-supervisor-e2e/app:test"
	script := counter + `echo "it's run $n of $0"; [ $n -le 2 ] && exit 42; exit 0`
	cmdJSON, _ := json.Marshal([]string{script, "app"})
	dockerfile := "FROM " + busyboxImage + "\nENTRYPOINT [\"/bin/sh\", \"-c\"]\nCMD " + string(cmdJSON) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := dockerBuild(filepath.Join(dir, "Dockerfile"), dir, "-t", image); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	rulesFile := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesFile, []byte(rules42), 0o644)

	line, err := exec.Command(env.injector, "docker-args", image, "--rules", rulesFile, "--supervisor", env.supervisor).Output()
	if err != nil {
		t.Fatalf("docker-args: %v %s", err, stderrOf(err))
	}
	t.Logf("docker run --rm %s", line)
	out, err := exec.Command("sh", "-c", `eval "docker run --rm --label `+containerLabel+` $("$0" docker-args "$1" --rules "$2" --supervisor "$3")"`,
		env.injector, image, rulesFile, env.supervisor).CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v\n%s", err, out)
	}
	for _, want := range []string{"it's run 1 of app", "it's run 3 of app", "restarts=2"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// An image whose STOPSIGNAL is SIGQUIT (nginx's) is stopped with SIGQUIT:
// docker-args reads it from the image and makes it a stop for the
// supervisor, so the workload's exit on SIGQUIT is not judged by the rules
// (which here restart every exit) and the container stops.
func TestImageStopSignalStops(t *testing.T) {
	need(t)
	dir := t.TempDir()
	dockerfile := "FROM " + busyboxImage + "\nSTOPSIGNAL SIGQUIT\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	image := "restart-supervisor-e2e/stopsignal:test"
	if out, err := dockerBuild(filepath.Join(dir, "Dockerfile"), dir, "-t", image); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	c := startContainer(t, dockerArgs(t, image, rulesAlways, "sh", "-c",
		counter+`trap 'echo quitting; exit 3' QUIT; echo ready; while :; do sleep 1; done`)...)
	waitLog(t, c, "ready", 30*time.Second)
	took := stop(t, c)
	checkStopped(t, c, took, 3)
	if l := logs(t, c); !strings.Contains(l, "quitting") || strings.Contains(l, "run 2") || strings.Contains(l, restartLine) {
		t.Errorf("want the QUIT handler to run once and no restart; log:\n%s", l)
	}
}
