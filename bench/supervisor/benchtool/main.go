// Command benchtool holds the measuring parts of bench/supervisor.sh.
//
//	benchtool spawn -n N [-mkdir DIR] LABEL=[VAR=VALUE...] COMMAND...
//	                                        start overhead, interleaved runs;
//	                                        {i} in DIR and VALUEs is the run
//	benchtool probe                         restart-latency workload (Go fallback for cprobe)
//	benchtool respawn ARGV...                 baseline: the smallest possible restart loop
//	benchtool latency LOGFILE [KEY]         exit→next-start latencies from a probe log
//	benchtool split -n N -log DIR [-mkdir DIR] LABEL=[VAR=VALUE...] COMMAND...
//	                                        start overhead split in two: launch →
//	                                        workload running, workload exit → X exited;
//	                                        the workload is the probe, PROBE_LOG set per run
//
// With BENCH_RESULTS set, the medians are also recorded there
// (internal/benchresult): start.LABEL.wall_ns and .cpu_ns, split.LABEL.start_ns
// and .exit_ns, restart.KEY.median_ns and .per_s.
package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/internal/benchresult"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchtool spawn|probe|respawn|latency ...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "spawn":
		spawn(os.Args[2:])
	case "probe":
		probe()
	case "respawn":
		respawn(os.Args[2:])
	case "latency":
		key := ""
		if len(os.Args) > 3 {
			key = os.Args[3]
		}
		latency(os.Args[2], key)
	case "split":
		split(os.Args[2:])
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

// spawn runs every command N times, round-robin so that machine noise hits
// all of them alike, and prints the median wall time of each and its ratio
// to the first (bare) and to the one labelled tini.
func spawn(args []string) {
	n := 300
	fresh := "" // a directory made before each run, outside the timing
	for len(args) > 1 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-n":
			n, _ = strconv.Atoi(args[1])
		case "-mkdir":
			fresh = args[1]
		}
		args = args[2:]
	}
	type cmd struct {
		label string
		env   []string // VAR=VALUE before the command; {i} is the run number
		argv  []string
		times []time.Duration
		cpu   []time.Duration // user+system of the process and what it reaped
	}
	var cmds []*cmd
	for _, a := range args {
		label, c, _ := strings.Cut(a, "=")
		x := &cmd{label: label, argv: strings.Fields(c)}
		for len(x.argv) > 1 && strings.Contains(x.argv[0], "=") {
			x.env, x.argv = append(x.env, x.argv[0]), x.argv[1:]
		}
		cmds = append(cmds, x)
	}
	for i := 0; i < n+10; i++ {
		for _, c := range cmds {
			if fresh != "" {
				// An emptyDir exists before the container starts.
				if err := os.MkdirAll(strings.ReplaceAll(fresh, "{i}", strconv.Itoa(i)+"-"+c.label), 0o755); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
			}
			t0 := time.Now()
			x := exec.Command(c.argv[0], c.argv[1:]...)
			if c.env != nil {
				// A fresh value per run (a state directory, say) keeps
				// one run from seeing what the run before it left.
				x.Env = os.Environ()
				for _, e := range c.env {
					x.Env = append(x.Env, strings.ReplaceAll(e, "{i}", strconv.Itoa(i)+"-"+c.label))
				}
			}
			if err := x.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", c.label, err)
				os.Exit(1)
			}
			if i >= 10 { // warm-up rounds are discarded
				c.times = append(c.times, time.Since(t0))
				c.cpu = append(c.cpu, x.ProcessState.UserTime()+x.ProcessState.SystemTime())
			}
		}
	}
	base := median(cmds[0].times)
	var tini, tiniCPU time.Duration
	for _, c := range cmds {
		if c.label == "tini" {
			tini, tiniCPU = median(c.times), median(c.cpu)
		}
	}
	fmt.Printf("%-20s %10s %10s %9s %9s %10s %9s\n", "start overhead", "median", "p90", "×bare", "×tini", "cpu", "cpu×tini")
	for _, c := range cmds {
		m, cpu := median(c.times), median(c.cpu)
		rt, rc := "-", "-"
		if tini > 0 {
			rt = fmt.Sprintf("%.2f", float64(m)/float64(tini))
			rc = fmt.Sprintf("%.2f", float64(cpu)/float64(tiniCPU))
		}
		fmt.Printf("%-20s %10s %10s %9.2f %9s %10s %9s\n", c.label, m.Round(time.Microsecond), pct(c.times, 0.9).Round(time.Microsecond),
			float64(m)/float64(base), rt, cpu.Round(time.Microsecond), rc)
		benchresult.Record("start."+c.label+".wall_ns", float64(m))
		benchresult.Record("start."+c.label+".cpu_ns", float64(cpu))
	}
}

func now() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// probe is the Go version of cprobe/probe.c: it appends "S <ns>" on
// start and "E <ns>" right before exiting, exits 42 until it has run
// PROBE_N times, then 0.
func probe() {
	start := now()
	log := os.Getenv("PROBE_LOG")
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		os.Exit(3)
	}
	fmt.Fprintf(f, "S %d\n", start)
	n, _ := strconv.Atoi(os.Getenv("PROBE_N"))
	cnt := countFile(log + ".count")
	code := 42
	if cnt >= n {
		code = 0
	}
	fmt.Fprintf(f, "E %d\n", now())
	os.Exit(code)
}

func countFile(p string) int {
	b, _ := os.ReadFile(p)
	c, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	c++
	os.WriteFile(p, []byte(strconv.Itoa(c)), 0o644)
	return c
}

// respawn is the baseline: fork/exec, wait4, again, as fast as a process
// can do it, with nothing else. The supervisor's latency minus this one
// is what the supervisor itself costs.
func respawn(argv []string) {
	for {
		pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
		if ws.ExitStatus() != 42 {
			return
		}
	}
}

// latency pairs each "E" with the next "S" and reports the gaps.
func latency(path, key string) {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var gaps []time.Duration
	var firstS, lastE, pendingE int64 = -1, 0, -1
	runs := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		kind, v, _ := strings.Cut(sc.Text(), " ")
		ns, _ := strconv.ParseInt(v, 10, 64)
		switch kind {
		case "S":
			runs++
			if firstS < 0 {
				firstS = ns
			}
			if pendingE >= 0 {
				gaps = append(gaps, time.Duration(ns-pendingE))
			}
		case "E":
			pendingE, lastE = ns, ns
		}
	}
	if len(gaps) == 0 {
		fmt.Fprintln(os.Stderr, "no restarts in", path)
		os.Exit(1)
	}
	total := time.Duration(lastE - firstS)
	if key != "" {
		benchresult.Record("restart."+key+".median_ns", float64(median(gaps)))
		benchresult.Record("restart."+key+".per_s", float64(len(gaps))/total.Seconds())
	}
	fmt.Printf("runs=%d median=%s p90=%s p99=%s restarts/s=%.0f\n", runs, median(gaps).Round(time.Microsecond),
		pct(gaps, 0.9).Round(time.Microsecond), pct(gaps, 0.99).Round(time.Microsecond), float64(len(gaps))/total.Seconds())
}

// split runs each command N times, interleaved, with the probe as its
// workload (PROBE_N=1: it exits 0 at once), and prints the medians of the
// two halves of the run: from the launch to the probe's first instruction
// (the supervisor's start-up, fork and exec), and from the probe's last
// instruction to the supervisor's exit being reaped here (reaping,
// deciding, the final status and the exit).
func split(args []string) {
	n, logDir, fresh := 100, "", ""
	for len(args) > 1 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-n":
			n, _ = strconv.Atoi(args[1])
		case "-log":
			logDir = args[1]
		case "-mkdir":
			fresh = args[1]
		}
		args = args[2:]
	}
	type cmd struct {
		label       string
		env, argv   []string
		start, exit []time.Duration
	}
	var cmds []*cmd
	for _, a := range args {
		label, c, _ := strings.Cut(a, "=")
		x := &cmd{label: label, argv: strings.Fields(c)}
		for len(x.argv) > 1 && strings.Contains(x.argv[0], "=") {
			x.env, x.argv = append(x.env, x.argv[0]), x.argv[1:]
		}
		cmds = append(cmds, x)
	}
	for i := 0; i < n+5; i++ {
		for _, c := range cmds {
			run := strconv.Itoa(i) + "-" + c.label
			log := logDir + "/" + run + ".log"
			if fresh != "" {
				// As in spawn: the state directory exists, empty, as an
				// emptyDir does before the container starts.
				if err := os.MkdirAll(strings.ReplaceAll(fresh, "{i}", run), 0o755); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
			}
			x := exec.Command(c.argv[0], c.argv[1:]...)
			x.Env = append(os.Environ(), "PROBE_LOG="+log, "PROBE_N=1")
			for _, e := range c.env {
				x.Env = append(x.Env, strings.ReplaceAll(e, "{i}", run))
			}
			t0 := now()
			if err := x.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", c.label, err)
				os.Exit(1)
			}
			t1 := now()
			data, err := os.ReadFile(log)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			var s, e int64
			for _, line := range strings.Split(string(data), "\n") {
				kind, v, _ := strings.Cut(line, " ")
				ns, _ := strconv.ParseInt(v, 10, 64)
				switch kind {
				case "S":
					s = ns
				case "E":
					e = ns
				}
			}
			if i >= 5 && s > 0 && e > 0 {
				c.start = append(c.start, time.Duration(s-t0))
				c.exit = append(c.exit, time.Duration(t1-e))
			}
		}
	}
	fmt.Printf("%-20s %14s %14s %14s\n", "start/exit split", "launch→run", "exit→reaped", "sum")
	for _, c := range cmds {
		ms, me := median(c.start), median(c.exit)
		fmt.Printf("%-20s %14s %14s %14s\n", c.label, ms.Round(time.Microsecond), me.Round(time.Microsecond), (ms + me).Round(time.Microsecond))
		benchresult.Record("split."+c.label+".start_ns", float64(ms))
		benchresult.Record("split."+c.label+".exit_ns", float64(me))
	}
}
