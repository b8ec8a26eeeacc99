// Command webhook is the load benchmark of the admission webhook: it runs
// the real server (TLS, handler, injector) and a no-op webhook on loopback
// and sends both the same AdmissionReview at a fixed rate, open loop (each
// request's latency counts from its scheduled time, so a stall is not
// hidden by sending less). Rounds alternate between the two servers so that
// machine noise hits both alike; it prints p50/p90/p99 per server and the
// ratio of the webhook to the no-op baseline.
//
//	go run ./bench/webhook -rps 1000 -duration 30s
package main

import (
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
	"slices"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/webhook"
)

func main() {
	rps := flag.Int("rps", 1000, "requests per second to each server")
	duration := flag.Duration("duration", 30*time.Second, "sending time per server, split over the rounds")
	rounds := flag.Int("rounds", 6, "alternating rounds (noop, webhook, noop, ...)")
	maxInFlight := flag.Int("max-in-flight", 256, "bound on concurrent requests; a send beyond it is counted as dropped")
	podFile := flag.String("pod", "webhook/testdata/realistic-pod.yaml", "pod manifest sent in every review")
	flag.Parse()
	if err := run(*rps, *duration, *rounds, *maxInFlight, *podFile); err != nil {
		fmt.Fprintln(os.Stderr, "bench/webhook:", err)
		os.Exit(1)
	}
}

type result struct {
	lat           []time.Duration
	errs, dropped int64
	sent          int64
	elapsed       time.Duration
}

func run(rps int, duration time.Duration, rounds, maxInFlight int, podFile string) error {
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
	quiet := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
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
	injectURL, err := start(&webhook.Handler{
		Mutator:    injector.New(injector.Options{SupervisorImage: "example.test/restart-supervisor:bench"}),
		Entrypoint: webhook.EntrypointDeny, Native: webhook.NativeOff, Metrics: webhook.NewMetrics(), Log: quiet,
	})
	if err != nil {
		return err
	}
	noopURL, err := start(noopHandler{})
	if err != nil {
		return err
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: maxInFlight,
	}}
	if err := sanity(client, injectURL, body); err != nil {
		return err
	}

	per := duration / time.Duration(rounds)
	fmt.Printf("loopback HTTPS, %d rps, %v per server in %d alternating rounds, max %d in flight, %d-byte review\n",
		rps, duration, rounds, maxInFlight, len(body))
	all := map[string]*result{"noop": {}, "webhook": {}}
	for r := 0; r < rounds; r++ {
		for _, s := range []struct{ name, url string }{{"noop", noopURL}, {"webhook", injectURL}} {
			res := load(client, s.url, body, rps, per, maxInFlight)
			a := all[s.name]
			a.lat = append(a.lat, res.lat...)
			a.errs += res.errs
			a.dropped += res.dropped
			a.sent += res.sent
			a.elapsed += res.elapsed
		}
	}
	q := map[string][4]time.Duration{}
	for _, name := range []string{"noop", "webhook"} {
		a := all[name]
		slices.Sort(a.lat)
		q[name] = [4]time.Duration{pct(a.lat, 50), pct(a.lat, 90), pct(a.lat, 99), pct(a.lat, 100)}
		fmt.Printf("%-8s sent %6d  ok %6d  errors %d  dropped %d  achieved %6.0f rps  p50 %8v  p90 %8v  p99 %8v  max %8v\n",
			name, a.sent, len(a.lat), a.errs, a.dropped, float64(a.sent)/a.elapsed.Seconds(),
			q[name][0].Round(time.Microsecond), q[name][1].Round(time.Microsecond), q[name][2].Round(time.Microsecond), q[name][3].Round(time.Microsecond))
	}
	fmt.Printf("ratio webhook/noop: p50 %.2fx  p90 %.2fx  p99 %.2fx\n",
		ratio(q["webhook"][0], q["noop"][0]), ratio(q["webhook"][1], q["noop"][1]), ratio(q["webhook"][2], q["noop"][2]))
	if all["webhook"].errs > 0 || all["noop"].errs > 0 {
		return fmt.Errorf("requests failed")
	}
	return nil
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
		res.sent++
		if inFlight.Load() >= int64(maxInFlight) {
			res.dropped++
			continue
		}
		inFlight.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer inFlight.Add(-1)
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
				res.lat = append(res.lat, lat)
			} else {
				res.errs++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(begin)
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
