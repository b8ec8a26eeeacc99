package supervise

import (
	"os"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// BenchmarkRestartCycle measures one full in-place restart cycle with
// backoff 0: /bin/true runs and exits, the loop reaps it, decides with the
// rules and starts it again. ns/op is the cycle time (workload run time
// included); restarts/s is its inverse.
func BenchmarkRestartCycle(b *testing.B) {
	o := Options{Path: "/bin/true", Argv: []string{"true"}, Env: os.Environ(), GracePeriod: time.Second}
	c, err := parseForBench(`{"restartPolicy":"Always","podRestartPolicy":"Never","backoff":{"initial":"0s"}}`)
	if err != nil {
		b.Fatal(err)
	}
	o.Config = c
	starts := 0
	self, _ := os.FindProcess(os.Getpid())
	o.OnChange = func(s State) {
		if s.Phase == contract.PhaseRunning {
			starts++
			if starts == b.N {
				self.Signal(os.Interrupt)
			}
		}
	}
	b.ResetTimer()
	r := Run(o)
	b.StopTimer()
	if r.Restarts < b.N-1 {
		b.Fatalf("%d restarts, want %d", r.Restarts, b.N-1)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "restarts/s")
}
