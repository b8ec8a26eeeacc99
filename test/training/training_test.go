//go:build training

package training

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "write docs/training-process.md from this run")

// TestInPlaceRecovery: an unfaulted run, then RUNS (default 5) runs of each
// fault with both ranks under the supervisor. Every faulted run must end
// with the unfaulted run's final loss, bit for bit.
func TestInPlaceRecovery(t *testing.T) {
	needTorch(t)
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
		"comparison with the kubelet's own restart, Job and JobSet recreation and torchrun's `--max-restarts` on a real kubelet\n"+
		"is [training.md](training.md).\n\n", steps, every)
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

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// loadAverage is the one-minute load average, for the report's header.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}
