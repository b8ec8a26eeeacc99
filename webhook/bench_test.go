package webhook

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

// NoopHandler is the baseline: what any webhook must do at least — read
// and decode the review, answer "allowed" with the request's UID.
type NoopHandler struct{}

func (NoopHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	out, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: reviewTypeMeta,
		Response: &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func benchHandler(b *testing.B) *Handler {
	h := newHandler()
	h.Log = slog.New(slog.DiscardHandler)
	h.Metrics = NewMetrics()
	return h
}

// BenchmarkReview measures one review of testdata/realistic-pod.yaml, in-process (the
// handler's own cost) and over loopback HTTPS (what the API server sees),
// against the no-op baseline in the same run. Compare with benchstat or
// read the ratio of ns/op.
func BenchmarkReview(b *testing.B) {
	pod, err := os.ReadFile("testdata/realistic-pod.yaml")
	if err != nil {
		b.Fatal(err)
	}
	body := podReview(b, string(pod))
	for _, tc := range []struct {
		name string
		h    func() http.Handler
	}{
		{"noop", func() http.Handler { return NoopHandler{} }},
		{"inject", func() http.Handler { return benchHandler(b) }},
	} {
		b.Run(tc.name+"/in-process", func(b *testing.B) {
			h := tc.h()
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			defer reportCPU(b)()
			for b.Loop() {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
				}
			}
		})
		b.Run(tc.name+"/https", func(b *testing.B) {
			var ts *testServer
			if h, ok := tc.h().(*Handler); ok {
				ts = startServer(b, h)
			} else {
				ts = startServerWith(b, tc.h(), NewMetrics(), slog.New(slog.DiscardHandler))
			}
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				resp, err := ts.Client.Post(ts.URL, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("HTTP %d", resp.StatusCode)
				}
			}
		})
	}
}

// reportCPU adds cpu-ns/op: the process's user+system CPU time per
// operation (server and, for https, client). On a shared machine it moves
// far less than wall time, which includes waiting for a core.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() { b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op") }
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
