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
// alone. And with -pin (the default where taskset and two CPUs exist) the
// same rounds also run against a second pair of servers in a process of
// their own pinned to CPU 0, loaded by a generator process pinned to CPU 1,
// so that generator and servers no longer share a core.
//
//	go run ./bench/webhook -rps 1000 -duration 30s
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
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	role := flag.String("role", "", "internal: \"server\" or \"client\", the pinned processes")
	dir := flag.String("dir", "", "internal: the key pair's directory, for -role")
	flag.Parse()
	var err error
	switch *role {
	case "server":
		err = serveRole(*dir)
	case "client":
		err = clientRole(*dir, *rps, *maxInFlight)
	default:
		err = run(*rps, *duration, *rounds, *maxInFlight, *podFile, *pin)
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

func run(rps int, duration time.Duration, rounds, maxInFlight int, podFile string, pin bool) error {
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
	var pinned *pinnedPair
	if pin {
		if pinned, err = startPinned(dir, rps, maxInFlight, body); err != nil {
			fmt.Println("pinned rounds skipped:", err)
		} else {
			defer pinned.close()
			targets = append(targets, target{"noop-pinned", pinned.noop}, target{"webhook-pinned", pinned.inject})
		}
	}

	per := duration / time.Duration(rounds)
	fmt.Printf("loopback HTTPS, %d rps, %v per server in %d alternating rounds, max %d in flight, %d-byte review\n",
		rps, duration, rounds, maxInFlight, len(body))
	if pinned != nil {
		fmt.Println("*-pinned: servers in a process pinned to CPU 0, the generator in one pinned to CPU 1 (taskset)")
	}
	all := map[string]*result{}
	for _, t := range targets {
		all[t.name] = &result{}
	}
	for r := 0; r < rounds; r++ {
		for _, t := range targets {
			var res result
			if strings.HasSuffix(t.name, "-pinned") {
				if res, err = pinned.load(t.url, per); err != nil {
					return err
				}
			} else {
				res = load(client, t.url, body, rps, per, maxInFlight)
			}
			all[t.name].add(res)
		}
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
	fmt.Printf("ratio webhook/noop: p50 %.2fx  p90 %.2fx  p99 %.2fx\n",
		ratio(q["webhook"][0], q["noop"][0]), ratio(q["webhook"][1], q["noop"][1]), ratio(q["webhook"][2], q["noop"][2]))
	if pinned != nil {
		fmt.Printf("ratio webhook/noop, pinned: p50 %.2fx  p90 %.2fx  p99 %.2fx\n",
			ratio(q["webhook-pinned"][0], q["noop-pinned"][0]), ratio(q["webhook-pinned"][1], q["noop-pinned"][1]), ratio(q["webhook-pinned"][2], q["noop-pinned"][2]))
		fmt.Printf("pinned / shared cores: noop p99 %.2fx  webhook p99 %.2fx\n",
			ratio(q["noop-pinned"][2], q["noop"][2]), ratio(q["webhook-pinned"][2], q["webhook"][2]))
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

// pinnedPair is the server process pinned to CPU 0 and the generator
// process pinned to CPU 1.
type pinnedPair struct {
	server, client *exec.Cmd
	serverIn       io.WriteCloser
	clientIn       io.WriteCloser
	clientOut      *json.Decoder
	noop, inject   string
}

func startPinned(dir string, rps, maxInFlight int, body []byte) (*pinnedPair, error) {
	if goruntime.NumCPU() < 2 {
		return nil, fmt.Errorf("%d CPU", goruntime.NumCPU())
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := &pinnedPair{}
	p.server = exec.Command(taskset, "-c", "0", self, "-role", "server", "-dir", dir)
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
		return nil, fmt.Errorf("pinned server: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "review.json"), body, 0o600); err != nil {
		p.close()
		return nil, err
	}
	p.client = exec.Command(taskset, "-c", "1", self, "-role", "client", "-dir", dir,
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

// load runs one round through the pinned generator.
func (p *pinnedPair) load(url string, d time.Duration) (result, error) {
	var res result
	if _, err := fmt.Fprintln(p.clientIn, url, int64(d)); err != nil {
		return res, err
	}
	err := p.clientOut.Decode(&res)
	return res, err
}

func (p *pinnedPair) close() {
	for _, c := range []struct {
		cmd *exec.Cmd
		in  io.WriteCloser
	}{{p.client, p.clientIn}, {p.server, p.serverIn}} {
		if c.cmd == nil {
			continue
		}
		if c.in != nil {
			c.in.Close()
		}
		_ = c.cmd.Wait()
	}
}

// serveRole is the pinned server process: both servers, their URLs on
// stdout, until stdin closes.
func serveRole(dir string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	noopURL, injectURL, err := startServers(ctx, dir)
	if err != nil {
		return err
	}
	fmt.Println(noopURL, injectURL)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// clientRole is the pinned generator: for each "URL DURATION" line on
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
