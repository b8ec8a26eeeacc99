// Command webhook is the load benchmark of the admission webhook: it runs
// the real server (TLS, handler, injector) and a no-op webhook on loopback
// and sends both the same AdmissionReview at a fixed rate, open loop (each
// request's latency counts from its scheduled time, so a stall is not
// hidden by sending less). Rounds alternate between the two servers so that
// machine noise hits both alike; it prints p50/p90/p99 per server and the
// ratio of the webhook to the no-op baseline.
//
// The load generator's share of the tail is reported two ways. Every
// request records its send lag: how late the generator started it after
// its scheduled time, which counts in its latency and is the generator's
// alone. The same rounds also run against a second pair of servers in a
// process of their own, loaded by a generator process of its own, both on
// both CPUs (*-procs): as in a cluster, where the API server is another
// process, the generator's garbage and the servers' are collected apart.
// And with -pin (the default where taskset and two CPUs exist) a third
// pair runs pinned to CPU 0, its generator pinned to CPU 1 (*-pinned), so
// that generator and servers no longer share a core.
//
//	go run ./bench/webhook -rps 1000 -duration 30s
//
// The servers run under the memory policy serve sets for a container limit
// of -memory-limit (webhook.TuneMemory; the chart's 256 MiB by default, 0
// for the runtime's own): in the shared rows that is the whole process's,
// the generator's too.
//
// With BENCH_RESULTS set, each server's figures are also recorded there
// (internal/benchresult) as webhook.SERVER.{p50_ns,p90_ns,p99_ns,lag_p99_ns,sent,ok,dropped}.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/internal/benchresult"
	"github.com/restart-supervisor/restart-supervisor/webhook"
)

func main() {
	rps := flag.Int("rps", 1000, "requests per second to each server")
	duration := flag.Duration("duration", 30*time.Second, "sending time per server, split over the rounds")
	rounds := flag.Int("rounds", 6, "alternating rounds (noop, webhook, noop, ...)")
	maxInFlight := flag.Int("max-in-flight", 256, "bound on concurrent requests; a send beyond it is counted as dropped")
	podFile := flag.String("pod", "webhook/testdata/realistic-pod.yaml", "pod manifest sent in every review")
	pin := flag.Bool("pin", true, "also run the rounds with the servers in a process pinned to CPU 0 and the generator in one pinned to CPU 1 (needs taskset and 2 CPUs)")
	memoryLimit := flag.Int64("memory-limit", 256<<20, "the container memory limit, in bytes, whose policy (webhook.TuneMemory) the servers run under; 0: none")
	role := flag.String("role", "", "internal: \"server\" or \"client\", the processes of a pair")
	gcStatsFile := flag.String("gc-stats", "server-gc.json", "internal: where -role server writes its collector's figures, in -dir")
	dir := flag.String("dir", "", "internal: the key pair's directory, for -role")
	flag.Parse()
	tuned := webhook.TuneMemory(*memoryLimit)
	var err error
	switch *role {
	case "server":
		err = serveRole(*dir, *gcStatsFile)
	case "client":
		err = clientRole(*dir, *rps, *maxInFlight)
	default:
		fmt.Printf("memory policy for a %d-byte limit: soft limit %d, GOGC %d (0: the runtime's)\n", *memoryLimit, tuned.SoftLimit, tuned.GCPercent)
		err = run(*rps, *duration, *rounds, *maxInFlight, *podFile, *pin, *memoryLimit)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/webhook:", err)
		os.Exit(1)
	}
}

type result struct {
	Lat []time.Duration
	// Lag is, per request, how late the generator started it after its
	// scheduled time.
	Lag           []time.Duration
	Errs, Dropped int64
	Sent          int64
	Elapsed       time.Duration
}

func (a *result) add(r result) {
	a.Lat = append(a.Lat, r.Lat...)
	a.Lag = append(a.Lag, r.Lag...)
	a.Errs += r.Errs
	a.Dropped += r.Dropped
	a.Sent += r.Sent
	a.Elapsed += r.Elapsed
}

func run(rps int, duration time.Duration, rounds, maxInFlight int, podFile string, pin bool, memoryLimit int64) error {
	podYAML, err := os.ReadFile(podFile)
	if err != nil {
		return err
	}
	podJSON, err := yaml.YAMLToJSON(podYAML)
	if err != nil {
		return err
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "bench", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: "shop",
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: podJSON}},
	})
	if err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "bench-webhook-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ca, err := webhook.NewCA("bench", time.Now())
	if err != nil {
		return err
	}
	serving, err := webhook.NewServingCert(ca, nil, []string{"127.0.0.1"}, time.Now())
	if err != nil {
		return err
	}
	if err := webhook.WriteKeyPair(dir, serving, ca.CertPEM); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	noopURL, injectURL, err := startServers(ctx, dir)
	if err != nil {
		return err
	}
	client := newClient(ca.CertPEM, maxInFlight)
	if err := sanity(client, injectURL, body); err != nil {
		return err
	}
	warm(client, noopURL, body)

	type target struct{ name, url string }
	targets := []target{{"noop", noopURL}, {"webhook", injectURL}}
	pairs := map[string]*procPair{}
	for _, kind := range []string{"-procs", "-pinned"} {
		if kind == "-pinned" && !pin {
			continue
		}
		p, err := startProcs(dir, kind, rps, maxInFlight, memoryLimit, body)
		if err != nil {
			fmt.Printf("%s rounds skipped: %v\n", kind, err)
			continue
		}
		defer p.close()
		pairs[kind] = p
		targets = append(targets, target{"noop" + kind, p.noop}, target{"webhook" + kind, p.inject})
	}

	stealBefore := hostSteal()
	per := duration / time.Duration(rounds)
	fmt.Printf("loopback HTTPS, %d rps, %v per server in %d alternating rounds, max %d in flight, %d-byte review\n",
		rps, duration, rounds, maxInFlight, len(body))
	fmt.Println("noop, webhook: servers and generator in this process; *-procs: servers in a process of their own, the generator in another")
	if pairs["-pinned"] != nil {
		fmt.Println("*-pinned: servers in a process pinned to CPU 0, the generator in one pinned to CPU 1 (taskset)")
	}
	all := map[string]*result{}
	roundP99 := map[string][]time.Duration{}
	cycles := map[string]uint64{} // the shared rows' collections, generator's included
	for _, t := range targets {
		all[t.name] = &result{}
	}
	for r := 0; r < rounds; r++ {
		for _, t := range targets {
			var res result
			if _, kind, ok := strings.Cut(t.name, "-"); ok {
				if res, err = pairs["-"+kind].load(t.url, per); err != nil {
					return err
				}
			} else {
				before := gcCycles()
				res = load(client, t.url, body, rps, per, maxInFlight)
				cycles[t.name] += gcCycles() - before
			}
			roundP99[t.name] = append(roundP99[t.name], pct(slices.Sorted(slices.Values(res.Lat)), 99))
			all[t.name].add(res)
		}
	}
	// A stall of the host (tens of ms, seen in either server's rounds
	// alike) lands in one round and sets the pooled p99 of the whole run;
	// the median of the rounds' p99 keeps what every round shows.
	medP99 := map[string]time.Duration{}
	for name, ps := range roundP99 {
		slices.Sort(ps)
		medP99[name] = ps[len(ps)/2]
		if len(ps)%2 == 0 {
			medP99[name] = (ps[len(ps)/2-1] + ps[len(ps)/2]) / 2
		}
		benchresult.Record("webhook."+name+".round_p99_median_ns", float64(medP99[name]))
	}
	// Time the hypervisor gave this machine's CPUs to others: a run with
	// much of it measured the host's neighbours, not the servers.
	if steal := hostSteal() - stealBefore; stealBefore >= 0 {
		fmt.Printf("host steal time during the rounds: %v\n", steal.Round(time.Millisecond))
		benchresult.Record("webhook.host_steal_ns", float64(steal))
	}
	q := map[string][4]time.Duration{}
	failed := false
	for _, t := range targets {
		a := all[t.name]
		slices.Sort(a.Lat)
		slices.Sort(a.Lag)
		q[t.name] = [4]time.Duration{pct(a.Lat, 50), pct(a.Lat, 90), pct(a.Lat, 99), pct(a.Lat, 100)}
		lag99 := pct(a.Lag, 99)
		fmt.Printf("%-15s sent %6d  ok %6d  errors %d  dropped %d  achieved %6.0f rps  p50 %8v  p90 %8v  p99 %8v  max %8v  send lag p50 %7v p99 %8v (%.0f%% of p99)\n",
			t.name, a.Sent, len(a.Lat), a.Errs, a.Dropped, float64(a.Sent)/a.Elapsed.Seconds(),
			q[t.name][0].Round(time.Microsecond), q[t.name][1].Round(time.Microsecond), q[t.name][2].Round(time.Microsecond), q[t.name][3].Round(time.Microsecond),
			pct(a.Lag, 50).Round(time.Microsecond), lag99.Round(time.Microsecond), 100*ratio(lag99, q[t.name][2]))
		failed = failed || a.Errs > 0
		key := "webhook." + t.name + "."
		benchresult.Record(key+"p50_ns", float64(q[t.name][0]))
		benchresult.Record(key+"p90_ns", float64(q[t.name][1]))
		benchresult.Record(key+"p99_ns", float64(q[t.name][2]))
		benchresult.Record(key+"lag_p99_ns", float64(lag99))
		benchresult.Record(key+"sent", float64(a.Sent))
		benchresult.Record(key+"ok", float64(len(a.Lat)))
		benchresult.Record(key+"dropped", float64(a.Dropped))
	}
	benchresult.Record("webhook.rps", float64(rps))
	benchresult.Record("webhook.review_bytes", float64(len(body)))
	for _, t := range targets {
		fmt.Printf("%-15s p99 of the rounds, sorted:", t.name)
		for _, p := range roundP99[t.name] {
			fmt.Printf(" %v", p.Round(time.Microsecond))
		}
		fmt.Printf("  median %v\n", medP99[t.name].Round(time.Microsecond))
	}
	fmt.Printf("collections in the shared process during its rounds: noop %d, webhook %d\n", cycles["noop"], cycles["webhook"])
	benchresult.Record("webhook.noop.gc_cycles", float64(cycles["noop"]))
	benchresult.Record("webhook.webhook.gc_cycles", float64(cycles["webhook"]))
	fmt.Printf("ratio webhook/noop: p50 %.2fx  p90 %.2fx  p99 %.2fx  rounds' median p99 %.2fx\n",
		ratio(q["webhook"][0], q["noop"][0]), ratio(q["webhook"][1], q["noop"][1]), ratio(q["webhook"][2], q["noop"][2]),
		ratio(medP99["webhook"], medP99["noop"]))
	for _, kind := range []string{"-procs", "-pinned"} {
		p := pairs[kind]
		if p == nil {
			continue
		}
		fmt.Printf("ratio webhook/noop, %s: p50 %.2fx  p90 %.2fx  p99 %.2fx  rounds' median p99 %.2fx\n", kind[1:],
			ratio(q["webhook"+kind][0], q["noop"+kind][0]), ratio(q["webhook"+kind][1], q["noop"+kind][1]), ratio(q["webhook"+kind][2], q["noop"+kind][2]),
			ratio(medP99["webhook"+kind], medP99["noop"+kind]))
		p.close()
		var gc gcStats
		if b, err := os.ReadFile(filepath.Join(dir, "server-gc"+kind+".json")); err == nil {
			_ = json.Unmarshal(b, &gc)
		}
		rss := p.serverPeakRSS()
		fmt.Printf("%s server process: peak RSS %.1f MiB, %d collections stopping the world for %v in all (%d reviews sent to it)\n",
			kind[1:], float64(rss)/(1<<20), gc.Cycles, gc.PauseSum.Round(time.Microsecond), all["noop"+kind].Sent+all["webhook"+kind].Sent)
		key := "webhook." + kind[1:] + "_server_"
		benchresult.Record(key+"peak_rss_bytes", float64(rss))
		benchresult.Record(key+"gc_cycles", float64(gc.Cycles))
		benchresult.Record(key+"gc_pause_ns", float64(gc.PauseSum))
	}
	if failed {
		return fmt.Errorf("requests failed")
	}
	return nil
}

// startServers starts the webhook and the no-op server on loopback with
// the key pair in dir and returns their URLs.
func startServers(ctx context.Context, dir string) (noopURL, injectURL string, err error) {
	quiet := slog.New(slog.DiscardHandler)
	start := func(h http.Handler) (string, error) {
		certs := webhook.NewCertWatcher(dir, quiet, nil)
		if err := certs.Load(); err != nil {
			return "", err
		}
		ml, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		hl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		s := &webhook.Server{Handler: h, Certs: certs, Log: quiet}
		go func() { _ = s.Serve(ctx, ml, hl) }()
		return "https://" + ml.Addr().String() + "/mutate", nil
	}
	if injectURL, err = start(&webhook.Handler{
		Mutator:    injector.New(injector.Options{SupervisorImage: "example.test/restart-supervisor:bench"}),
		Entrypoint: webhook.EntrypointDeny, Native: webhook.NativeOff, Metrics: webhook.NewMetrics(), Log: quiet,
	}); err != nil {
		return "", "", err
	}
	if noopURL, err = start(noopHandler{}); err != nil {
		return "", "", err
	}
	return noopURL, injectURL, nil
}

func newClient(caPEM []byte, maxInFlight int) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: maxInFlight,
	}}
}

// warm sends one review, so that no round pays the TLS handshake.
func warm(c *http.Client, url string, body []byte) {
	if resp, err := c.Post(url, "application/json", bytes.NewReader(body)); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// procPair is a server process and a generator process: both on any CPU
// (kind "-procs"), or the server pinned to CPU 0 and the generator to CPU
// 1 (kind "-pinned").
type procPair struct {
	server, client *exec.Cmd
	serverIn       io.WriteCloser
	clientIn       io.WriteCloser
	clientOut      *json.Decoder
	noop, inject   string
}

func startProcs(dir, kind string, rps, maxInFlight int, memoryLimit int64, body []byte) (*procPair, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	command := func(cpu string, args ...string) *exec.Cmd { return exec.Command(self, args...) }
	if kind == "-pinned" {
		if goruntime.NumCPU() < 2 {
			return nil, fmt.Errorf("%d CPU", goruntime.NumCPU())
		}
		taskset, err := exec.LookPath("taskset")
		if err != nil {
			return nil, err
		}
		command = func(cpu string, args ...string) *exec.Cmd {
			return exec.Command(taskset, append([]string{"-c", cpu, self}, args...)...)
		}
	}
	p := &procPair{}
	p.server = command("0", "-role", "server", "-dir", dir, "-memory-limit", fmt.Sprint(memoryLimit), "-gc-stats", "server-gc"+kind+".json")
	p.server.Stderr = os.Stderr
	if p.serverIn, err = p.server.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := p.server.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.server.Start(); err != nil {
		return nil, err
	}
	if _, err := fmt.Fscan(bufio.NewReader(out), &p.noop, &p.inject); err != nil {
		p.close()
		return nil, fmt.Errorf("%s server: %v", kind, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "review.json"), body, 0o600); err != nil {
		p.close()
		return nil, err
	}
	p.client = command("1", "-role", "client", "-dir", dir,
		"-rps", fmt.Sprint(rps), "-max-in-flight", fmt.Sprint(maxInFlight))
	p.client.Stderr = os.Stderr
	if p.clientIn, err = p.client.StdinPipe(); err != nil {
		p.close()
		return nil, err
	}
	cout, err := p.client.StdoutPipe()
	if err != nil {
		p.close()
		return nil, err
	}
	p.clientOut = json.NewDecoder(cout)
	if err := p.client.Start(); err != nil {
		p.client = nil
		p.close()
		return nil, err
	}
	return p, nil
}

// load runs one round through the pair's generator.
func (p *procPair) load(url string, d time.Duration) (result, error) {
	var res result
	if _, err := fmt.Fprintln(p.clientIn, url, int64(d)); err != nil {
		return res, err
	}
	err := p.clientOut.Decode(&res)
	return res, err
}

// serverPeakRSS is the server process's peak resident set in bytes, once
// it has exited; 0 before.
func (p *procPair) serverPeakRSS() int64 {
	if p.server == nil || p.server.ProcessState == nil {
		return 0
	}
	if ru, ok := p.server.ProcessState.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10
	}
	return 0
}

func (p *procPair) close() {
	for _, c := range []struct {
		cmd *exec.Cmd
		in  io.WriteCloser
	}{{p.client, p.clientIn}, {p.server, p.serverIn}} {
		if c.cmd == nil || c.cmd.ProcessState != nil {
			continue
		}
		if c.in != nil {
			c.in.Close()
		}
		_ = c.cmd.Wait()
	}
}

// serveRole is a pair's server process: both servers, their URLs on
// stdout, until stdin closes; then its gcStats in dir/gcStatsFile.
func serveRole(dir, gcStatsFile string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	noopURL, injectURL, err := startServers(ctx, dir)
	if err != nil {
		return err
	}
	fmt.Println(noopURL, injectURL)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return writeGCStats(filepath.Join(dir, gcStatsFile))
}

// hostSteal is the steal time of all CPUs so far (/proc/stat's eighth
// figure, in USER_HZ ticks of 10 ms), or -1 where it cannot be read.
func hostSteal() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return -1
	}
	n, err := strconv.ParseInt(f[8], 10, 64)
	if err != nil {
		return -1
	}
	return time.Duration(n) * 10 * time.Millisecond
}

func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// gcStats is what the collector did in a server process over the
// whole run: cycles, and the time the world was stopped for it.
type gcStats struct {
	Cycles   uint64
	PauseSum time.Duration
}

// writeGCStats writes the process's gcStats to path. The pauses are read
// from the runtime's histogram, each bucket counted at its upper bound.
func writeGCStats(path string) error {
	samples := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/sched/pauses/total/gc:seconds"}}
	metrics.Read(samples)
	st := gcStats{Cycles: samples[0].Value.Uint64()}
	h := samples[1].Value.Float64Histogram()
	for i, n := range h.Counts {
		if up := h.Buckets[i+1]; n > 0 && !math.IsInf(up, 1) {
			st.PauseSum += time.Duration(float64(n) * up * float64(time.Second))
		}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// clientRole is a pair's generator: for each "URL DURATION" line on
// stdin, one round, its result as a JSON line on stdout.
func clientRole(dir string, rps, maxInFlight int) error {
	caPEM, err := os.ReadFile(filepath.Join(dir, webhook.CAFile))
	if err != nil {
		return err
	}
	body, err := os.ReadFile(filepath.Join(dir, "review.json"))
	if err != nil {
		return err
	}
	client := newClient(caPEM, maxInFlight)
	warmed := map[string]bool{}
	enc := json.NewEncoder(os.Stdout)
	in := bufio.NewReader(os.Stdin)
	for {
		var url string
		var d int64
		if _, err := fmt.Fscan(in, &url, &d); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if !warmed[url] {
			warm(client, url, body)
			warmed[url] = true
		}
		if err := enc.Encode(load(client, url, body, rps, time.Duration(d), maxInFlight)); err != nil {
			return err
		}
	}
}

// sanity checks that the webhook really injects the benchmark pod.
func sanity(c *http.Client, url string, body []byte) error {
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var rev admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&rev); err != nil {
		return err
	}
	if rev.Response == nil || !rev.Response.Allowed || len(rev.Response.Patch) == 0 {
		return fmt.Errorf("the benchmark pod is not injected: %+v", rev.Response)
	}
	return nil
}

func load(c *http.Client, url string, body []byte, rps int, d time.Duration, maxInFlight int) result {
	var (
		mu       sync.Mutex
		res      result
		wg       sync.WaitGroup
		inFlight atomic.Int64
	)
	interval := time.Second / time.Duration(rps)
	begin := time.Now()
	n := int(d / interval)
	for i := 0; i < n; i++ {
		due := begin.Add(time.Duration(i) * interval)
		if w := time.Until(due); w > 0 {
			time.Sleep(w)
		}
		res.Sent++
		if inFlight.Load() >= int64(maxInFlight) {
			res.Dropped++
			continue
		}
		inFlight.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer inFlight.Add(-1)
			lag := time.Since(due)
			resp, err := c.Post(url, "application/json", bytes.NewReader(body))
			ok := err == nil
			if ok {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok = resp.StatusCode == http.StatusOK
			}
			lat := time.Since(due)
			mu.Lock()
			if ok {
				res.Lat = append(res.Lat, lat)
				res.Lag = append(res.Lag, lag)
			} else {
				res.Errs++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(begin)
	return res
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	if i > 0 {
		i--
	}
	return sorted[min(i, len(sorted)-1)]
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// noopHandler is the baseline: what any webhook must do at least — read and
// decode the review, answer "allowed" with the request's UID.
type noopHandler struct{}

func (noopHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, webhook.MaxRequestBytes))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(b, &review); err != nil || review.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	out, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}
