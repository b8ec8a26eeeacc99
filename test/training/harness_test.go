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
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

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

// noTorch says why python cannot run train.py, when it cannot.
var noTorch string

func TestMain(m *testing.M) {
	flag.Parse()
	if out, err := exec.Command(python, "-c", "import torch.distributed").CombinedOutput(); err != nil {
		noTorch = fmt.Sprintf("%s cannot import torch.distributed (hack/apt-install.sh python3-torch): %v\n%s", python, err, out)
		os.Exit(m.Run())
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

// needTorch fails the test in CI and skips it elsewhere when Debian's
// python3-torch is not installed (hack/test.sh installs it).
func needTorch(t *testing.T) {
	t.Helper()
	if noTorch == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(noTorch)
	}
	t.Skip(noTorch + " (skipped outside CI)")
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
	// Env is the supervisor's attempt context the start line shows.
	Env map[string]string `json:"env"`
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
