//go:build training

package training

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "write docs/training-process.md from this run")

const (
	python = "/usr/bin/python3"
	steps  = 40
	every  = 10
	fault  = 25
	// Exit codes the rules restart: the faulting rank's 42, SIGKILL's 137,
	// and 1, the peer's Python error when gloo loses the connection.
	rulesConfig = `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"1s"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[1,42,137]}}]}`
)

var bin string

func TestMain(m *testing.M) {
	flag.Parse()
	if out, err := exec.Command(python, "-c", "import torch.distributed").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "training: %s cannot import torch.distributed (apt-get install python3-torch): %v\n%s", python, err, out)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "training-bin")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "restart-supervisor")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/restart-supervisor")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// line is one JSON line of train.py.
type line struct {
	Rank       int     `json:"rank"`
	Event      string  `json:"event"`
	Step       int     `json:"step"`
	Loss       float64 `json:"loss"`
	Time       float64 `json:"time"`
	Attempt    int     `json:"attempt"`
	ResumeFrom int     `json:"resumeFrom"`
	FinalLoss  float64 `json:"finalLoss"`
}

type rankRun struct {
	lines  []line
	stderr string
	status int
}

var port = 29700

// job runs the two ranks, each under its own supervisor when supervised,
// and returns what each printed.
func job(t *testing.T, supervised bool, faultArgs ...string) [2]rankRun {
	t.Helper()
	port++
	ckpt := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var runs [2]rankRun
	var wg sync.WaitGroup
	for r := range 2 {
		args := append([]string{"../../examples/training/train.py", "--steps", strconv.Itoa(steps), "--ckpt-every", strconv.Itoa(every),
			"--ckpt-dir", ckpt, "--timeout", "30"}, faultArgs...)
		name := python
		if supervised {
			name, args = bin, append([]string{"--", python}, args...)
		}
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
			"MASTER_PORT="+strconv.Itoa(port), "RESTART_SUPERVISOR_CONFIG="+rulesConfig)
		out, _ := cmd.StdoutPipe()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var l line
				if json.Unmarshal(sc.Bytes(), &l) == nil {
					runs[r].lines = append(runs[r].lines, l)
				}
			}
			cmd.Wait()
			runs[r].status = cmd.ProcessState.ExitCode()
			runs[r].stderr = stderr.String()
		}()
	}
	wg.Wait()
	return runs
}

func finalLoss(t *testing.T, runs [2]rankRun) float64 {
	t.Helper()
	for r, run := range runs {
		if run.status != 0 {
			t.Fatalf("rank %d exited %d:\n%s", r, run.status, run.stderr)
		}
	}
	for _, l := range runs[0].lines {
		if l.Event == "done" {
			return l.FinalLoss
		}
	}
	t.Fatalf("rank 0 printed no final loss:\n%s", runs[0].stderr)
	return 0
}

// recovery reads one faulted run: seconds from the fault to the first step
// completed after the resume on every rank, and the steps done again.
type recovery struct {
	seconds    float64
	stepsLost  int
	finalLoss  float64
	attempts   [2]int
	resumeFrom int
}

func measure(t *testing.T, runs [2]rankRun) recovery {
	t.Helper()
	var rec recovery
	rec.finalLoss = finalLoss(t, runs)
	var faultAt float64
	for _, l := range runs[1].lines {
		if l.Event == "fault" {
			faultAt = l.Time
		}
	}
	if faultAt == 0 {
		t.Fatal("rank 1 printed no fault")
	}
	for r, run := range runs {
		resumed := false
		for _, l := range run.lines {
			switch {
			case l.Event == "start" && l.Time > faultAt:
				resumed, rec.resumeFrom, rec.attempts[r] = true, l.ResumeFrom, l.Attempt
			case resumed && l.Event == "" && l.Step > rec.resumeFrom:
				rec.seconds = max(rec.seconds, l.Time-faultAt)
				resumed = false
			}
		}
		if rec.attempts[r] < 1 {
			t.Fatalf("rank %d was not restarted in place (attempt %d):\n%s", r, rec.attempts[r], run.stderr)
		}
	}
	rec.stepsLost = fault - 1 - rec.resumeFrom
	return rec
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// TestInPlaceRecovery: an unfaulted run, then RUNS (default 5) runs of each
// fault with both ranks under the supervisor. Every faulted run must end
// with the unfaulted run's final loss, bit for bit.
func TestInPlaceRecovery(t *testing.T) {
	n := 5
	if v, err := strconv.Atoi(os.Getenv("RUNS")); err == nil && v > 0 {
		n = v
	}
	loadStart := loadAverage()
	want := finalLoss(t, job(t, false))
	t.Logf("unfaulted final loss %v", want)
	type row struct {
		name    string
		args    []string
		seconds []float64
		lost    int
	}
	rows := []*row{
		{name: "rank 1 exits 42 at step 25", args: []string{"--fault-kind", "exit", "--fault-code", "42"}},
		{name: "rank 1 is SIGKILLed at step 25", args: []string{"--fault-kind", "kill"}},
	}
	for _, rw := range rows {
		for i := range n {
			rec := measure(t, job(t, true, append(rw.args, "--fault-step", strconv.Itoa(fault))...))
			if rec.finalLoss != want {
				t.Fatalf("%s, run %d: final loss %v, want the unfaulted %v", rw.name, i, rec.finalLoss, want)
			}
			rw.seconds = append(rw.seconds, rec.seconds)
			rw.lost = rec.stepsLost
			t.Logf("%s, run %d: %.2f s to the first step after resume, %d steps lost, attempts %v", rw.name, i, rec.seconds, rec.stepsLost, rec.attempts)
		}
	}
	if !*update {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Training under the supervisor, process level\n\n")
	fmt.Fprintf(&b, "Written by `make training` (`go test -tags training ./test/training -update`), not by hand. %s, %d CPUs, %s/%s, %s, load average %s at the start and %s at the end.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), loadStart, loadAverage())
	fmt.Fprintf(&b, "[examples/training/train.py](../examples/training/train.py): DDP over gloo, 2 ranks on loopback, Debian's python3-torch,\n"+
		"%d steps, a checkpoint every %d, seeded synthetic data. Each rank runs under its own `restart-supervisor` (as one container\n"+
		"per pod would), with `Restart` rules on 1, 42 and 137: the faulting rank's exit, and the peer's Python error when\n"+
		"gloo loses its connection, which came within seconds in every run (no collective timeout was reached). Both ranks then\n"+
		"restart in place and resume from the last checkpoint. These are processes on one machine, not pods on a kubelet: the\n"+
		"comparison with the kubelet's own restart, Job and JobSet recreation and torchrun's `--max-restarts` on real nodes is not\n"+
		"in this table yet.\n\n", steps, every)
	fmt.Fprintf(&b, "| Fault | Runs | Fault → first step after resume, median | worst | Steps lost | Final loss equals the unfaulted run's |\n|---|---|---|---|---|---|\n")
	for _, rw := range rows {
		worst := 0.0
		for _, s := range rw.seconds {
			worst = max(worst, s)
		}
		fmt.Fprintf(&b, "| %s | %d | %.2f s | %.2f s | %d | yes (%v) |\n", rw.name, len(rw.seconds), median(rw.seconds), worst, rw.lost, want)
	}
	fmt.Fprintf(&b, "\nMost of the time to resume is Python importing torch and the new rendezvous; the supervisor's own restart is under a\nmillisecond (docs/benchmarks.md).\n")
	if err := os.WriteFile("../../docs/training-process.md", []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// loadAverage is the one-minute load average, for the report's header.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}
