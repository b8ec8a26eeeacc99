package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/yaml"
)

// FuzzAdmissionReview: whatever body arrives, the handler answers with a
// status it documents, never panics (not even one that safeReview would
// turn into a denial), echoes the uid in every 200, and allocates a bounded
// amount for the body it was given.
func FuzzAdmissionReview(f *testing.F) {
	raw := func(podYAML string) []byte {
		b, err := yaml.YAMLToJSON([]byte(podYAML))
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(reviewOf(f, raw(nativePod), "Pod", "pods", admissionv1.Create))
	f.Add(reviewOf(f, raw(strings.Replace(lookupPod, "%s", "apps", 1)), "Pod", "pods", admissionv1.Create))
	f.Add(reviewOf(f, raw(`{"metadata":{"name":"a","annotations":{"restart-supervisor.dev/rules":"containers:\n  app:\n    restartPolicy: Never\n"}},"spec":{"containers":[{"name":"app","image":"x","command":["/a"]}]}}`), "Pod", "pods", admissionv1.Create))
	f.Add(reviewOf(f, raw(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"template":{"spec":{"containers":[{"name":"a","image":"x","restartPolicy":"Never"}]}}}}`), "Deployment", "deployments", admissionv1.Create))
	f.Add(reviewOf(f, raw(`{}`), "Pod", "pods", admissionv1.Update))
	f.Add(reviewOf(f, raw(`{"kind":"Service"}`), "Service", "services", admissionv1.Create))
	if b, err := os.ReadFile("testdata/realistic-pod.yaml"); err == nil {
		f.Add(reviewOf(f, raw(string(b)), "Pod", "pods", admissionv1.Create))
	}
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}`))
	f.Add([]byte(`[1,2]`))

	h := newHandler()
	var panicked bool
	h.Log = slog.New(panicSpotter{slog.NewTextHandler(io.Discard, nil), &panicked})
	f.Fuzz(func(t *testing.T, body []byte) {
		panicked = false
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/mutate?timeout=10s", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		runtime.ReadMemStats(&after)
		if panicked {
			t.Fatalf("the review panicked: %s", rec.Body.Bytes())
		}
		// The bound for a review: 32 MiB of heap; plus a generous
		// multiple of the body, which is decoded once.
		if n := after.TotalAlloc - before.TotalAlloc; n > 32<<20+64*uint64(len(body)) {
			t.Fatalf("a %d-byte body allocated %d MiB", len(body), n>>20)
		}
		switch rec.Code {
		case http.StatusOK:
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if line := strings.TrimSuffix(rec.Body.String(), "\n"); strings.Contains(line, "\n") {
				t.Fatalf("HTTP %d message is not one line: %q", rec.Code, rec.Body.String())
			}
			return
		default:
			t.Fatalf("HTTP %d: %s", rec.Code, rec.Body.Bytes())
		}
		var in, out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("200 without a review response: %v: %s", err, rec.Body.Bytes())
		}
		_ = json.Unmarshal(body, &in)
		if in.Request == nil || out.Response.UID != in.Request.UID || out.Response.UID == "" {
			t.Fatalf("response uid %q for a request uid that is not it", out.Response.UID)
		}
	})
}

// panicSpotter notes a "panic while reviewing" log record: safeReview's
// recovery, which keeps the server up but is a bug all the same.
type panicSpotter struct {
	slog.Handler
	panicked *bool
}

func (p panicSpotter) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "panic") {
		*p.panicked = true
	}
	return p.Handler.Handle(ctx, r)
}

func (p panicSpotter) WithAttrs(as []slog.Attr) slog.Handler {
	return panicSpotter{p.Handler.WithAttrs(as), p.panicked}
}
