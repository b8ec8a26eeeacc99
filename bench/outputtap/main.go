// Command outputtap measures what the watchdog's output pattern costs a
// workload's output: the supervisor binary runs the same workload with no
// watchdog (the output untouched: the workload writes to the harness's
// pipe itself) and with `watchdog: {outputPattern: ...}` (through the
// supervisor's tap), rounds interleaved, and the harness reads the
// supervisor's standard output.
//
//   - throughput: the workload writes -mb MB of 25-byte lines ("step N
//     loss 0.123456") as fast as it can; the figure is the wall time to
//     the last byte read, median of the rounds.
//     Four patterns: lines that match, a literal no line holds, two
//     literals of which one is required, and none required (the worst).
//
//   - latency: the workload writes a line holding its clock every 10 ms;
//     the figure is how long after that the harness reads it, p50 and p99
//     over the lines of all rounds.
//
//     go build -o /tmp/rs ./cmd/restart-supervisor
//     go run ./bench/outputtap -supervisor /tmp/rs
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	sup := flag.String("supervisor", "", "the restart-supervisor binary")
	mb := flag.Int("mb", 100, "megabytes of lines per throughput run")
	rounds := flag.Int("rounds", 5, "interleaved rounds")
	flag.Parse()
	if *sup == "" {
		fmt.Fprintln(os.Stderr, "outputtap: -supervisor is required")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "outputtap-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	// tapped: the lines match (a heartbeat, then 100 ms unmatched);
	// no-match: a pattern with a literal no line holds (one search per
	// read); alternation: no literal prefix, but one of two literals
	// required; worst: no literal required at all (case-folded), so
	// every read is matched by the regexp engine.
	configs := map[string]string{"untouched": "",
		"tapped":      "watchdog: {outputPattern: 'step [0-9]+', stallSeconds: 3600}\n",
		"no-match":    "watchdog: {outputPattern: 'epoch [0-9]+', stallSeconds: 3600}\n",
		"alternation": "watchdog: {outputPattern: '(epoch|iter) [0-9]+', stallSeconds: 3600}\n",
		"worst":       "watchdog: {outputPattern: '(?i)epoch [0-9]+', stallSeconds: 3600}\n"}
	order := []string{"untouched", "tapped", "no-match", "alternation", "worst"}
	for name, doc := range configs {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(doc), 0o644); err != nil {
			fail(err)
		}
	}
	lines := fmt.Sprintf(`yes 'step 123456 loss 0.123456' | head -c %d`, *mb<<20)
	stamps := `i=0; while [ $i -lt 100 ]; do echo "step $i $(date +%s%N)"; sleep 0.01; i=$((i+1)); done`
	walls := map[string][]time.Duration{}
	lags := map[string][]time.Duration{}
	for r := 0; r < *rounds; r++ {
		for _, name := range order {
			args := []string{"--", "/bin/sh", "-c", lines}
			if configs[name] != "" {
				args = append([]string{"--config", filepath.Join(dir, name+".yaml")}, args...)
			}
			began := time.Now()
			run(*sup, args, func(rd io.Reader) { _, _ = io.Copy(io.Discard, rd) })
			walls[name] = append(walls[name], time.Since(began))
			args[len(args)-1] = stamps
			run(*sup, args, func(rd io.Reader) {
				sc := bufio.NewScanner(rd)
				for sc.Scan() {
					got := time.Now()
					f := strings.Fields(sc.Text())
					if len(f) != 3 {
						continue
					}
					ns, err := strconv.ParseInt(f[2], 10, 64)
					if err == nil {
						lags[name] = append(lags[name], got.Sub(time.Unix(0, ns)))
					}
				}
			})
		}
	}
	fmt.Printf("%d MB of 25-byte lines, %d rounds; a line every 10 ms, %d rounds of 100\n", *mb, *rounds, *rounds)
	base := median(walls["untouched"])
	for _, name := range order {
		w := median(walls[name])
		l := lags[name]
		slices.Sort(l)
		fmt.Printf("%-11s throughput median %8s (%.0f MB/s, %.2fx untouched)  line latency p50 %8s p99 %8s (%d lines)\n",
			name, w.Round(time.Millisecond), float64(*mb)/w.Seconds(), float64(w)/float64(base),
			pct(l, 50).Round(time.Microsecond), pct(l, 99).Round(time.Microsecond), len(l))
	}
}

// run runs the supervisor with args, its standard output read by read.
func run(sup string, args []string, read func(io.Reader)) {
	cmd := exec.Command(sup, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		fail(err)
	}
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	read(out)
	if err := cmd.Wait(); err != nil {
		fail(fmt.Errorf("%s %v: %w", sup, args, err))
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "outputtap:", err)
	os.Exit(1)
}
