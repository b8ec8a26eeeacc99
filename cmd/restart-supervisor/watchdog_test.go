package main_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stepWatchdog watches the output for "step N" lines, 3 s apart at most:
// fifteen times the test's pace, room for a loaded machine.
const stepWatchdog = `restartPolicy: Never
podRestartPolicy: Never
watchdog: {outputPattern: 'step [0-9]+', stallSeconds: 3, gracePeriodSeconds: 1}
`

// TestOutputPatternIsAHeartbeat: a workload that prints "step N" lines for
// 8 s (more than twice the stall timeout) is not stopped while it does; once it
// stops printing them (a last line without its newline, then a hang) it is
// stopped, and with no rule for 124 the supervisor exits 124. Its output
// reaches the supervisor's standard output and error byte for byte, the
// unfinished line included, through the tap's pipe.
func TestOutputPatternIsAHeartbeat(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "cfg.yaml", stepWatchdog, 0o644)
	w := writeFile(t, dir, "w.sh", `#!/bin/sh
fd1=$(readlink /proc/$$/fd/1); echo "$fd1" > `+dir+`/fd1
for i in $(seq 40); do echo "step $i loss 0.$i"; echo "warn $i" >&2; sleep 0.2; done
printf 'loss 0.01'
exec sleep 600
`, 0o755)
	var stdout bytes.Buffer
	cmd := exec.Command(bin, "--config", cfg, "--", w)
	cmd.Stdout = &stdout
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	began := time.Now()
	err := cmd.Run()
	took := time.Since(began)
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 124 {
		t.Fatalf("exit %v, want 124 (the watchdog's code, no rule for it); stderr:\n%s", err, stderr.String())
	}
	var want strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&want, "step %d loss 0.%d\n", i, i)
	}
	want.WriteString("loss 0.01")
	if stdout.String() != want.String() {
		t.Errorf("stdout %q, want the workload's %q", stdout.String(), want.String())
	}
	for i := 1; i <= 40; i++ {
		if !strings.Contains(stderr.String(), fmt.Sprintf("warn %d\n", i)) {
			t.Errorf("stderr lacks the workload's line %d:\n%s", i, stderr.String())
		}
	}
	if !strings.Contains(stderr.String(), "from=output") || !strings.Contains(stderr.String(), "reason=Stalled") {
		t.Errorf("no heartbeat from the output or no stall in the log:\n%s", stderr.String())
	}
	if fd1, _ := os.ReadFile(filepath.Join(dir, "fd1")); !strings.HasPrefix(string(fd1), "pipe:") {
		t.Errorf("the workload's stdout is %q, want the tap's pipe", fd1)
	}
	t.Logf("8 s of steps, 3 s of stall: %s", took.Round(10*time.Millisecond))
}

// TestNoPatternNoTap: without an output pattern the workload's standard
// output is the supervisor's own file, not a pipe (the output path is
// untouched), even with a heartbeat file.
func TestNoPatternNoTap(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "cfg.yaml", "watchdog: {heartbeatFile: "+dir+"/hb, stallSeconds: 60}\n", 0o644)
	w := writeFile(t, dir, "w.sh", "#!/bin/sh\nfd1=$(readlink /proc/$$/fd/1); echo \"$fd1\" > "+dir+"/fd1\n", 0o755)
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(bin, "--config", cfg, "--", w)
	cmd.Stdout = out
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	if fd1, _ := os.ReadFile(filepath.Join(dir, "fd1")); strings.TrimSpace(string(fd1)) != out.Name() {
		t.Errorf("the workload's stdout is %q, want the supervisor's own %s", fd1, out.Name())
	}
}

// TestPatternLeavesATerminalAlone: under a terminal (util-linux script) the
// workload's output stays the terminal even with an output pattern, and
// the log says that the pattern is not watched; with no heartbeat file the
// watchdog then sees nothing, and a run that lasts 2.5 stall timeouts is
// not stopped for it (it exits 0, not 124).
func TestPatternLeavesATerminalAlone(t *testing.T) {
	if _, err := exec.LookPath("script"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("util-linux script is needed for the terminal test")
		}
		t.Skip("no util-linux script here")
	}
	dir := t.TempDir()
	cfg := writeFile(t, dir, "cfg.yaml", strings.Replace(stepWatchdog, "stallSeconds: 3", "stallSeconds: 1", 1), 0o644)
	w := writeFile(t, dir, "w.sh", "#!/bin/sh\n[ -t 1 ] && [ -t 2 ] && echo tty > "+dir+"/tty\nsleep 2.5\n", 0o755)
	out, err := exec.Command("script", "-qec", bin+" --config "+cfg+" -- "+w, "/dev/null").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if strings.Contains(string(out), "Stalled") || !strings.Contains(string(out), "the watchdog sees no heartbeat") {
		t.Errorf("a watchdog that sees nothing stopped the run, or did not say it sees nothing:\n%s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "tty")); strings.TrimSpace(string(b)) != "tty" {
		t.Errorf("the workload's stdout or stderr is no terminal under a pattern; output:\n%s", out)
	}
	if !strings.Contains(string(out), "outputPattern is not watched") {
		t.Errorf("the log does not say the pattern is not watched:\n%s", out)
	}
}

// TestStalledMembersRestartThePodOnce: three members of a pod, each with a
// watchdog on its own heartbeat file and RestartAllContainers on 124,
// stop beating at the same moment, as the ranks of a hung collective do,
// and ignore SIGTERM, so that each stall's stop waits out a long grace.
// Once every member's watchdog has fired (the test waits for the three log
// lines, whatever the machine's load), the test kills the three runs: each
// stalled exit asks for a pod restart, and the pod restarts once (one
// generation): every member runs a second time, and none starts a round of
// its own.
func TestStalledMembersRestartThePodOnce(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	members := "RESTART_SUPERVISOR_POD_MEMBERS=a:regular,b:regular,c:regular"
	var sups []*sup
	for _, name := range []string{"a", "b", "c"} {
		hb := filepath.Join(dir, name+".hb")
		cfg := fmt.Sprintf(`{"restartPolicy":"Never","podRestartPolicy":"Never",%s,`+
			`"restartPolicyRules":[{"action":"RestartAllContainers","exitCodes":{"operator":"In","values":[124]}}],`+
			`"watchdog":{"heartbeatFile":%q,"firstHeartbeatSeconds":60,"stallSeconds":1,"gracePeriodSeconds":120}}`, podRoundBackoff, hb)
		w := writeFile(t, dir, name+".sh", fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/%[2]s.n 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/%[2]s.n
while [ $n -ge 2 ] || [ ! -e %[1]s/hang ]; do touch %[3]s; sleep 0.1; done
trap '' TERM; sleep 600 & wait; sleep 600
`, dir, name, hb), 0o755)
		sups = append(sups, start(t, podEnv(state, name, cfg, members), bin, "--", w))
	}
	all := func(n int) func() bool {
		return func() bool {
			for _, name := range []string{"a", "b", "c"} {
				if countIn(t, dir, name+".n") != n {
					return false
				}
			}
			return true
		}
	}
	waitFor(t, "the first runs", 15*time.Second, all(1))
	waitFor(t, "every member's first heartbeat", 30*time.Second, func() bool {
		for _, s := range sups {
			if !strings.Contains(s.stderr.String(), "first heartbeat") {
				return false
			}
		}
		return true
	})
	os.WriteFile(filepath.Join(dir, "hang"), nil, 0o644)
	killStalledRuns(t, func() []string {
		var logs []string
		for _, s := range sups {
			logs = append(logs, s.stderr.String())
		}
		return logs
	})
	waitFor(t, "the pod restart after the stall", 30*time.Second, all(2))
	time.Sleep(3 * time.Second) // three stall timeouts: room for a second round
	if !all(2)() {
		t.Errorf("runs a, b, c = %d, %d, %d after the stall, want 2 each", countIn(t, dir, "a.n"), countIn(t, dir, "b.n"), countIn(t, dir, "c.n"))
	}
	names, err := os.ReadDir(filepath.Join(state, "pod-restarts"))
	if err != nil {
		t.Fatal(err)
	}
	gens := 0
	for _, e := range names {
		if len(e.Name()) == 20 && strings.Trim(e.Name(), "0123456789") == "" {
			gens++
		}
	}
	if gens != 1 {
		t.Errorf("%d pod restart generations, want 1", gens)
	}
	stalls := 0
	for _, s := range sups {
		stalls += strings.Count(s.stderr.String(), "stopping the stalled workload")
		s.signal(syscall.SIGTERM)
	}
	for _, s := range sups {
		s.wait(20 * time.Second)
	}
	if stalls != 3 {
		t.Errorf("%d members stopped for their own stall, want all 3 (the case where each asks)", stalls)
	}
}

// stalledPID finds the pid of the run a watchdog is stopping in a
// supervisor's log.
var stalledPID = regexp.MustCompile(`stopping the stalled workload.* pid=([0-9]+)`)

// killStalledRuns waits until every log has a stall's stop, then SIGKILLs
// each stopped run's process group: the stalls all happen before any of
// their exits, in that order, however slow the machine.
func killStalledRuns(t *testing.T, logs func() []string) {
	t.Helper()
	var pids []int
	waitFor(t, "every member's stall", time.Minute, func() bool {
		pids = pids[:0]
		for _, l := range logs() {
			m := stalledPID.FindStringSubmatch(l)
			if m == nil {
				return false
			}
			pid, _ := strconv.Atoi(m[1])
			pids = append(pids, pid)
		}
		return true
	})
	for _, pid := range pids {
		syscall.Kill(-pid, syscall.SIGKILL)
	}
}
