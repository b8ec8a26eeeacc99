package main

import (
	"fmt"
	"strings"
)

// Targets of issue "Footprint at the floor", as README states them.
const (
	startTarget   = 1.3   // × go-floor, start and exit
	sizeTarget    = 2.5e6 // bytes, stripped static supervisor
	rssTargetKB   = 4096  // kB, idle while supervising
	restartTarget = 1e6   // ns, median in-place restart
	injectTarget  = 5000  // pods/s on the 1000-document stream
	// RSS above the binary's floor on 10× the stream, as a multiple of that
	// on the 1000-document stream: memory that follows the documents, not
	// the stream (a Go process cannot be a small multiple of a 700-byte
	// document; the runtime alone is megabytes).
	injectMemTarget = 1.5
	webhookTarget   = 1.5 // × the no-op handler's p99
)

// startForms are the supervisor's start-and-exit forms, each with the
// deps-floor form nearest to its work (none holds an inotify watch, so the
// RestartAllContainers form is compared with the injected one).
var startForms = []struct{ label, name, floor string }{
	{"restart-supervisor", "`restart-supervisor -- /bin/true`, no config", "deps-floor"},
	{"injected-form", "the injected form (rules in the environment, a fresh state volume)", "deps-floor-injected"},
	{"injected-rac", "the injected form of a `RestartAllContainers` pod (member list, inotify on `pod-restarts/`)", "deps-floor-injected"},
	{"config-file", "`--config FILE`", "deps-floor-config"},
}

func (r results) readmeTable() (string, error) {
	l := &lookup{r: r}
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("One run of `bash bench/run.sh`: %s. Every baseline is measured in the same run; the ratios are the figures to read. ", l.runLine())
	p("Details, and the earlier runs that explain each figure: [docs/benchmarks.md](docs/benchmarks.md#latest-run).\n\n")
	p("| What | Target | Measured | Baseline in the same run | |\n|---|---|---|---|---|\n")

	rs, rb := l.num("restart.restart-supervisor.median_ns"), l.num("restart.floor.median_ns")
	p("| in-place restart, workload exit → next exec (backoff 0) | median < 1 ms | %s median, %s restarts/s | a bare fork/exec/wait4 loop: %s (%s) | %s |\n",
		us(rs), rate(l.num("restart.restart-supervisor.per_s")), us(rb), x(rs, rb), verdict(rs < restartTarget))

	gf := l.num("start.go-floor.wall_ns")
	for _, f := range startForms {
		w, fl := l.num("start."+f.label+".wall_ns"), l.num("start."+f.floor+".wall_ns")
		p("| start and exit, %s | ≤ %.1f× go-floor | %s, %s go-floor | go-floor %s; %s %s, %s go-floor; tini %s | %s |\n",
			f.name, startTarget, ms(w), x(w, gf), ms(gf), f.floor, ms(fl), x(fl, gf), ms(l.num("start.tini.wall_ns")), verdict(w/gf <= startTarget))
	}

	for _, f := range []struct{ key, name, floor string }{
		{"restart-supervisor", "idle, no config", "deps-floor"},
		{"injected-form", "idle, injected form", "deps-floor-injected"},
	} {
		v := l.num("rss." + f.key + ".rss_kb")
		p("| supervisor RSS, %s | < 4 MiB | %s | deps-floor %s; go-floor %s; tini %s | %s |\n", f.name, kb(v),
			kb(l.num("rss."+f.floor+".rss_kb")), kb(l.num("rss.go-floor.rss_kb")), kb(l.num("rss.tini.rss_kb")), verdict(v < rssTargetKB))
	}
	p("| supervisor RSS while restarting continuously | | %s (peak %s) | | |\n",
		kb(l.num("rss.restarting.rss_kb")), kb(l.num("rss.restarting.hwm_kb")))

	size, df := l.num("size.restart-supervisor_bytes"), l.num("size.depsfloor_bytes")
	p("| stripped static supervisor | ≤ 2.5 MB | %s | deps-floor %s (%s of the target); go-floor %s; tini-static %s | %s |\n",
		bytesN(size), bytesN(df), x(df, sizeTarget), bytesN(l.num("size.gofloor_bytes")), sizeOf(l, "size.tini-static_bytes"), verdict(size <= sizeTarget))
	p("| `restart-probe` (the probes' network checks, run only for a check) | | %s | | |\n", bytesN(l.num("size.restart-probe_bytes")))

	for _, n := range []string{"1000", "10000"} {
		pps := l.num("inject." + n + ".bin.pods_per_s")
		target, status := "", ""
		if n == "1000" {
			target, status = "≥ 5000 pods/s", verdict(pps >= injectTarget)
		}
		p("| `restart-injector inject`, %s-document stream (%s pods) | %s | %s pods/s, %s wall | the binary's floor (`version`) %s | %s |\n",
			n, rate(l.num("inject."+n+".pods")), target, rate(pps), ms(l.num("inject."+n+".bin.wall_ns")), ms(l.num("inject."+n+".floor.wall_ns")), status)
	}
	r1, r10 := l.num("inject.1000.bin.rss_bytes"), l.num("inject.10000.bin.rss_bytes")
	f1, f10 := l.num("inject.1000.floor.rss_bytes"), l.num("inject.10000.floor.rss_bytes")
	p("| `restart-injector inject` peak RSS, 1000 and 10 000 documents (%s and %s of input) | follows the largest document, not the stream: above the floor, 10 000 documents ≤ %.1f× 1000 | %s and %s: %s and %s above the binary's floor (%s) | the floor (`version`) %s; the largest document %s | %s |\n",
		mib(l.num("inject.1000.input_bytes")), mib(l.num("inject.10000.input_bytes")), injectMemTarget, mib(r1), mib(r10), mib(r1-f1), mib(r10-f10), x(r10-f10, r1-f1), mib(f1),
		bytesN(l.num("inject.10000.largest_doc_bytes")), verdict((r10-f10) <= injectMemTarget*(r1-f1)))

	for _, v := range []struct{ suffix, name string }{
		{"", "shared cores"},
		{"-procs", "shared cores, servers and generator in processes of their own"},
		{"-pinned", "servers pinned to CPU 0, generator to CPU 1"},
	} {
		if v.suffix != "" && !l.has("webhook.webhook"+v.suffix+".p99_ns") {
			continue // a run from before the row existed, or without taskset
		}
		w, n := l.num("webhook.webhook"+v.suffix+".p99_ns"), l.num("webhook.noop"+v.suffix+".p99_ns")
		p("| webhook over loopback HTTPS at %s reviews/s, p99 (%s) | ≤ %.1f× the no-op | %s (%s); p50 %s; the generator's send lag is %.0f %% of the p99 | no-op handler p99 %s, p50 %s | %s |\n",
			rate(l.num("webhook.rps")), v.name, webhookTarget, ms(w), x(w, n), ms(l.num("webhook.webhook"+v.suffix+".p50_ns")),
			100*l.num("webhook.webhook"+v.suffix+".lag_p99_ns")/w, ms(n), ms(l.num("webhook.noop"+v.suffix+".p50_ns")), verdict(w/n <= webhookTarget))
	}
	return b.String(), l.err()
}

func sizeOf(l *lookup, key string) string {
	if !l.has(key) {
		return "not installed"
	}
	return bytesN(l.num(key))
}

func (r results) latestRun() (string, error) {
	l := &lookup{r: r}
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("Command: `bash bench/run.sh`; %s. The figures are in [benchmarks-run.tsv](benchmarks-run.tsv), what the programs printed in [benchmarks-run.log](benchmarks-run.log). Medians; every row of a table comes from the same interleaved rounds.\n\n", l.runLine())

	gf := l.num("start.go-floor.wall_ns")
	gfc := l.num("start.go-floor.cpu_ns")
	p("**Start and exit of `X -- /bin/true`** (wall; CPU is user+system of X and what it reaped):\n\n")
	p("| X | wall | ×go-floor | ×its deps-floor form | CPU | CPU ×go-floor |\n|---|---|---|---|---|---|\n")
	floors := map[string]string{}
	for _, f := range startForms {
		floors[f.label] = f.floor
	}
	for _, label := range []string{"bare", "tini", "tini-static", "dumb-init", "go-floor", "deps-floor", "deps-floor-config", "deps-floor-injected",
		"restart-supervisor", "injected-form", "injected-rac", "config-file", "before:plain", "before:injected", "before:config-file"} {
		key := "start." + label + ".wall_ns"
		if !l.has(key) && (label == "tini-static" || strings.HasPrefix(label, "before:")) {
			continue
		}
		w, c := l.num(key), l.num("start."+label+".cpu_ns")
		vsFloor := ""
		if fl, ok := floors[label]; ok {
			vsFloor = x(w, l.num("start."+fl+".wall_ns")) + " " + fl
		}
		p("| %s | %s | %s | %s | %s | %s |\n", label, ms(w), x(w, gf), vsFloor, ms(c), x(c, gfc))
	}

	p("\n**The same, split** at the probe's first and last instruction (static C probe as the workload):\n\n")
	p("| X | launch → workload running | workload exit → X reaped |\n|---|---|---|\n")
	for _, label := range []string{"go-floor", "deps-floor", "deps-floor-config", "deps-floor-injected", "restart-supervisor", "injected-form", "injected-rac", "config-file",
		"before:plain", "before:injected", "before:config-file"} {
		if !l.has("split."+label+".start_ns") && strings.HasPrefix(label, "before:") {
			continue
		}
		p("| %s | %s | %s |\n", label, ms(l.num("split."+label+".start_ns")), ms(l.num("split."+label+".exit_ns")))
	}

	p("\n**Stripped static binaries:** ")
	var sizes []string
	for _, k := range []struct{ key, name string }{{"restart-supervisor", "restart-supervisor"}, {"before", "the BEFORE build"}, {"depsfloor", "deps-floor"},
		{"gofloor", "go-floor"}, {"tini-static", "tini-static"}, {"tini", "tini (dynamic)"}, {"dumb-init", "dumb-init"}, {"restart-probe", "restart-probe"}} {
		if key := "size." + k.key + "_bytes"; l.has(key) {
			sizes = append(sizes, k.name+" "+bytesN(l.num(key)))
		}
	}
	p("%s.\n\n", strings.Join(sizes, ", "))

	p("**Resident memory**, one second after the start (VmRSS / VmHWM):\n\n| process | VmRSS | VmHWM |\n|---|---|---|\n")
	for _, k := range []string{"tini", "dumb-init", "go-floor", "deps-floor", "deps-floor-injected", "restart-supervisor", "injected-form",
		"before", "before:injected", "restarting"} {
		if !l.has("rss."+k+".rss_kb") && strings.HasPrefix(k, "before") {
			continue
		}
		p("| %s | %s | %s |\n", k, kb(l.num("rss."+k+".rss_kb")), kb(l.num("rss."+k+".hwm_kb")))
	}

	rs, rb := l.num("restart.restart-supervisor.median_ns"), l.num("restart.floor.median_ns")
	p("\n**In-place restart** (workload exit → next workload running, backoff 0): the supervisor %s, %s restarts/s; a bare fork/exec/wait4 loop %s, %s restarts/s (%s).\n\n",
		us(rs), rate(l.num("restart.restart-supervisor.per_s")), us(rb), rate(l.num("restart.floor.per_s")), x(rs, rb))

	p("**`restart-injector inject --no-lookup`** (the floor is `restart-injector version` in the same rounds):\n\n")
	p("| documents | input | largest document | wall | pods/s | CPU | peak RSS | floor: wall, peak RSS |\n|---|---|---|---|---|---|---|---|\n")
	for _, n := range []string{"1000", "10000"} {
		k := "inject." + n
		p("| %s | %s | %s | %s | %s | %s | %s | %s, %s |\n", n, bytesN(l.num(k+".input_bytes")), bytesN(l.num(k+".largest_doc_bytes")),
			ms(l.num(k+".bin.wall_ns")), rate(l.num(k+".bin.pods_per_s")), ms(l.num(k+".bin.cpu_ns")), mib(l.num(k+".bin.rss_bytes")),
			ms(l.num(k+".floor.wall_ns")), mib(l.num(k+".floor.rss_bytes")))
	}

	p("\n**Webhook**, %s reviews/s over loopback HTTPS, %s-byte review:\n\n", rate(l.num("webhook.rps")), rate(l.num("webhook.review_bytes")))
	p("| server | ok of sent | dropped | p50 | p90 | p99 | send lag p99 |\n|---|---|---|---|---|---|---|\n")
	for _, s := range []string{"noop", "webhook", "noop-procs", "webhook-procs", "noop-pinned", "webhook-pinned"} {
		k := "webhook." + s
		if !l.has(k+".p99_ns") && strings.Contains(s, "-") {
			continue
		}
		p("| %s | %s of %s | %s | %s | %s | %s | %s |\n", s, rate(l.num(k+".ok")), rate(l.num(k+".sent")), rate(l.num(k+".dropped")),
			ms(l.num(k+".p50_ns")), ms(l.num(k+".p90_ns")), ms(l.num(k+".p99_ns")), ms(l.num(k+".lag_p99_ns")))
	}
	return b.String(), l.err()
}
