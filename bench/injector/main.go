// Command injector measures `restart-injector inject` as a process on
// generated streams: wall time, pods per second, CPU time and peak RSS
// (the child's getrusage), for each binary given, interleaved run by run
// so that the load of a shared machine hits them alike. It prints medians
// and, with -baseline, each figure's ratio to the baseline binary's in
// the same run. Beside them it runs `BIN version` in the same rounds, the
// floor of any run of the binary (its pages and the Kubernetes packages'
// initialisation), and it reports the stream's largest document, the
// measure the peak RSS is to be a small multiple of. With BENCH_RESULTS set
// the medians are recorded there (internal/benchresult) as
// inject.DOCS.{bin,baseline,floor}.{wall_ns,cpu_ns,rss_bytes,pods_per_s}.
//
//	go build -o /tmp/new ./cmd/restart-injector
//	go run ./bench/injector -bin /tmp/new -baseline /tmp/old -docs 1000,10000 -runs 5
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/restart-supervisor/restart-supervisor/internal/benchresult"
	"github.com/restart-supervisor/restart-supervisor/internal/benchstream"
)

func main() {
	bin := flag.String("bin", "", "restart-injector binary to measure")
	baseline := flag.String("baseline", "", "restart-injector binary to compare with (optional)")
	docsFlag := flag.String("docs", "1000,10000", "comma-separated stream sizes, in documents")
	runs := flag.Int("runs", 5, "runs per binary and size")
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "usage: injector -bin BIN [-baseline BIN] [-docs N,N] [-runs N]")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "bench-injector-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	bins := []string{*bin}
	if *baseline != "" {
		bins = append(bins, *baseline)
	}
	fmt.Printf("%-8s %-9s %-10s %10s %10s %10s %10s %9s\n", "docs", "input", "binary", "wall", "pods/s", "cpu", "maxRSS", "RSS/in")
	for _, f := range strings.Split(*docsFlag, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			fail(err)
		}
		stream, pods := benchstream.Stream(n, true)
		path := filepath.Join(dir, "stream"+f+".yaml")
		if err := os.WriteFile(path, stream, 0o644); err != nil {
			fail(err)
		}
		largest := 0
		for _, d := range bytes.Split(stream, []byte("\n---\n")) {
			largest = max(largest, len(d))
		}
		benchresult.Record("inject."+f+".input_bytes", float64(len(stream)))
		benchresult.Record("inject."+f+".largest_doc_bytes", float64(largest))
		benchresult.Record("inject."+f+".pods", float64(pods))
		res := make([][]sample, len(bins))
		var floor []sample
		for r := 0; r < *runs; r++ {
			for k, b := range bins {
				s, err := run(b, "inject", "--no-lookup", "-q", "-f", path)
				if err != nil {
					fail(err)
				}
				res[k] = append(res[k], s)
			}
			s, err := run(*bin, "version")
			if err != nil {
				fail(err)
			}
			floor = append(floor, s)
		}
		var base sample
		for k := len(bins) - 1; k >= 0; k-- {
			m := median(res[k])
			if k == len(bins)-1 {
				base = m
			}
			name := "bin"
			if k == 1 {
				name = "baseline"
			}
			fmt.Printf("%-8d %-9s %-10s %10s %10.0f %10s %8.1fMB %8.1fx\n", n, mb(len(stream)), name,
				m.wall.Round(time.Millisecond), float64(pods)/m.wall.Seconds(), m.cpu.Round(time.Millisecond),
				float64(m.rss)/(1<<20), float64(m.rss)/float64(len(stream)))
			record(f+"."+name, m, pods)
			if k == 0 && len(bins) > 1 {
				fmt.Printf("%-8s %-9s %-10s %9.2fx %10s %9.2fx %9.2fx\n", "", "", "÷baseline",
					m.wall.Seconds()/base.wall.Seconds(), "", m.cpu.Seconds()/base.cpu.Seconds(), float64(m.rss)/float64(base.rss))
			}
		}
		fl := median(floor)
		fmt.Printf("%-8d %-9s %-10s %10s %10s %10s %8.1fMB   (`version`: the binary's floor; largest document %d bytes)\n", n, "", "floor",
			fl.wall.Round(time.Millisecond), "", fl.cpu.Round(time.Millisecond), float64(fl.rss)/(1<<20), largest)
		record(f+".floor", fl, 0)
	}
}

type sample struct {
	wall, cpu time.Duration
	rss       int64 // bytes
}

func record(key string, m sample, pods int) {
	benchresult.Record("inject."+key+".wall_ns", float64(m.wall))
	benchresult.Record("inject."+key+".cpu_ns", float64(m.cpu))
	benchresult.Record("inject."+key+".rss_bytes", float64(m.rss))
	if pods > 0 {
		benchresult.Record("inject."+key+".pods_per_s", float64(pods)/m.wall.Seconds())
	}
}

func run(bin string, args ...string) (sample, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdout = io.Discard
	var errb bytes.Buffer
	cmd.Stderr = &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return sample{}, fmt.Errorf("%s: %v: %s", bin, err, errb.String())
	}
	wall := time.Since(start)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return sample{wall: wall, cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), rss: ru.Maxrss << 10}, nil
}

func median(s []sample) sample {
	pick := func(less func(a, b sample) bool) sample {
		c := append([]sample(nil), s...)
		sort.Slice(c, func(i, j int) bool { return less(c[i], c[j]) })
		return c[len(c)/2]
	}
	return sample{
		wall: pick(func(a, b sample) bool { return a.wall < b.wall }).wall,
		cpu:  pick(func(a, b sample) bool { return a.cpu < b.cpu }).cpu,
		rss:  pick(func(a, b sample) bool { return a.rss < b.rss }).rss,
	}
}

func mb(n int) string { return fmt.Sprintf("%.1fMB", float64(n)/(1<<20)) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
