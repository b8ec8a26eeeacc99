package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
)

// testServer is a real Server on 127.0.0.1 with a freshly issued
// certificate, and an HTTPS client that trusts only that CA.
type testServer struct {
	URL, HealthURL string
	Client         *http.Client
	Metrics        *Metrics
	CA             KeyPair
	Dir            string
	cancel         context.CancelFunc
	done           chan error
}

func issue(t testing.TB, dir string, names ...string) KeyPair {
	t.Helper()
	ca, err := NewCA("test-ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	serving, err := NewServingCert(ca, names, []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteKeyPair(dir, serving, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	return ca
}

func startServer(t testing.TB, h *Handler) *testServer {
	t.Helper()
	if h.Metrics == nil {
		h.Metrics = NewMetrics()
	}
	if h.Log == nil {
		h.Log = testLogger(t)
	}
	return startServerWith(t, h, h.Metrics, h.Log)
}

func startServerWith(t testing.TB, h http.Handler, m *Metrics, log *slog.Logger) *testServer {
	t.Helper()
	return startServerOpts(t, h, m, log, nil)
}

// startServerOpts is startServerWith with edit applied to the Server first.
func startServerOpts(t testing.TB, h http.Handler, m *Metrics, log *slog.Logger, edit func(*Server)) *testServer {
	t.Helper()
	dir := t.TempDir()
	ca := issue(t, dir, "localhost")
	certs := NewCertWatcher(dir, log, func(nt time.Time) { m.CertExpiry.Set(float64(nt.Unix())) })
	if err := certs.Load(); err != nil {
		t.Fatal(err)
	}
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: h, Certs: certs, Metrics: m, Log: log, ShutdownTimeout: 10 * time.Second}
	if edit != nil {
		edit(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{
		URL:       "https://" + ml.Addr().String() + "/mutate",
		HealthURL: "http://" + hl.Addr().String(),
		Client:    &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(t, ca.CertPEM)}, Timeout: 30 * time.Second},
		Metrics:   m, CA: ca, Dir: dir, cancel: cancel, done: make(chan error, 1),
	}
	go func() { ts.done <- s.Serve(ctx, ml, hl) }()
	t.Cleanup(func() { ts.Stop(t) })
	return ts
}

// Stop cancels the server and waits for Serve to return.
func (ts *testServer) Stop(t testing.TB) {
	if ts.cancel == nil {
		return
	}
	ts.cancel()
	ts.cancel = nil
	if err := <-ts.done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func clientTLS(t testing.TB, caPEM []byte) *tls.Config {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("bad CA PEM")
	}
	return &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
}

// podReview wraps a Pod manifest (YAML) the way the API server does.
func podReview(t testing.TB, podYAML string) []byte {
	t.Helper()
	raw, err := yaml.YAMLToJSON([]byte(podYAML))
	if err != nil {
		t.Fatal(err)
	}
	return reviewOf(t, raw, "Pod", "pods", admissionv1.Create)
}

// reviewOf wraps an object the way the API server does: request.namespace
// is the object's namespace, or "apps" when it has none.
func reviewOf(t testing.TB, raw []byte, kind, resource string, op admissionv1.Operation) []byte {
	t.Helper()
	var meta struct {
		Metadata struct{ Namespace string } `json:"metadata"`
	}
	_ = json.Unmarshal(raw, &meta)
	ns := meta.Metadata.Namespace
	if ns == "" {
		ns = "apps"
	}
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("0f6e2a4c-7b1d-4e1e-9a52-5d0c1c3b9e11"),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: kind},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: resource},
			Namespace: ns,
			Operation: op,
			Object:    runtimeRaw(raw),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func post(t testing.TB, ts *testServer, contentType string, body []byte) (*http.Response, []byte) {
	t.Helper()
	resp, err := ts.Client.Post(ts.URL+"?timeout=10s", contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, out
}

func admit(t testing.TB, ts *testServer, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	resp, out := post(t, ts, "application/json", body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, out)
	}
	var rev admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &rev); err != nil {
		t.Fatalf("response is not an AdmissionReview: %v: %s", err, out)
	}
	if rev.APIVersion != "admission.k8s.io/v1" || rev.Kind != "AdmissionReview" {
		t.Fatalf("response type %s/%s", rev.APIVersion, rev.Kind)
	}
	if rev.Response == nil || rev.Response.UID != "0f6e2a4c-7b1d-4e1e-9a52-5d0c1c3b9e11" {
		t.Fatalf("response does not echo the request UID: %s", out)
	}
	return rev.Response
}

// applyPatch applies the response's JSON patch to the raw pod, as the API
// server does, and decodes the result.
func applyPatch(t testing.TB, rawPod []byte, resp *admissionv1.AdmissionResponse) ([]byte, *corev1.Pod) {
	t.Helper()
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patchType = %v, want JSONPatch", resp.PatchType)
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("patch does not decode: %v: %s", err, resp.Patch)
	}
	out, err := p.Apply(rawPod)
	if err != nil {
		t.Fatalf("patch does not apply: %v: %s", err, resp.Patch)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(out, &pod); err != nil {
		t.Fatal(err)
	}
	return out, &pod
}

const nativePod = `
apiVersion: v1
kind: Pod
metadata:
  name: trainer
  namespace: apps
spec:
  restartPolicy: Never
  containers:
  - name: trainer
    image: registry.test/app:1
    command: ["python", "train.py"]
    restartPolicy: Never
    restartPolicyRules:
    - action: Restart
      exitCodes: {operator: In, values: [42]}
  - name: exporter
    image: registry.test/app:1
    command: ["/exporter"]
`

func newHandler() *Handler {
	return &Handler{Mutator: injector.New(injector.Options{SupervisorImage: "example.test/restart-supervisor:test"}),
		Entrypoint: EntrypointDeny, Native: NativeOff}
}

func TestInjectsNativeRulesAsExplicitPatch(t *testing.T) {
	ts := startServer(t, newHandler())
	raw, _ := yaml.YAMLToJSON([]byte(nativePod))
	// A field this build's k8s.io/api does not know must survive: the patch
	// is explicit operations, not a diff of a re-encoded pod.
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		t.Fatal(err)
	}
	obj["spec"].(map[string]any)["futureField"] = map[string]any{"x": 1}
	raw, _ = json.Marshal(obj)
	resp := admit(t, ts, reviewOf(t, raw, "Pod", "pods", admissionv1.Create))
	if !resp.Allowed {
		t.Fatalf("denied: %+v", resp.Result)
	}
	out, pod := applyPatch(t, raw, resp)
	if !bytes.Contains(out, []byte(`"futureField":{"x":1}`)) {
		t.Errorf("unknown field lost by the patch: %s", out)
	}
	if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Name != contract.InstallContainer {
		t.Fatalf("init containers: %+v", pod.Spec.InitContainers)
	}
	tr := pod.Spec.Containers[0]
	if len(tr.Command) == 0 || tr.Command[0] != contract.SupervisorPath {
		t.Errorf("trainer command = %q", tr.Command)
	}
	if tr.RestartPolicy != nil || len(tr.RestartPolicyRules) != 0 {
		t.Errorf("native fields not removed: %v %v", tr.RestartPolicy, tr.RestartPolicyRules)
	}
	if ex := pod.Spec.Containers[1]; len(ex.Command) != 1 || ex.Command[0] != "/exporter" {
		t.Errorf("container without rules changed: %q", ex.Command)
	}
	if pod.Annotations[contract.AnnotationStatus] == "" {
		t.Errorf("no status annotation")
	}

	// Reinvocation: the injected pod goes through again and gets no patch.
	again := admit(t, ts, reviewOf(t, out, "Pod", "pods", admissionv1.Create))
	if !again.Allowed || len(again.Patch) != 0 {
		t.Errorf("second pass: allowed=%v patch=%s", again.Allowed, again.Patch)
	}
}

func TestPodWithoutRulesGetsNoPatch(t *testing.T) {
	ts := startServer(t, newHandler())
	resp := admit(t, ts, podReview(t, `
apiVersion: v1
kind: Pod
metadata: {name: plain}
spec:
  containers: [{name: app, image: registry.test/app:1}]
`))
	if !resp.Allowed || resp.Patch != nil || resp.PatchType != nil {
		t.Fatalf("want allowed without patch, got %+v", resp)
	}
}

func TestInvalidRulesDeniedWithFieldPath(t *testing.T) {
	ts := startServer(t, newHandler())
	resp := admit(t, ts, podReview(t, strings.Replace(nativePod, "action: Restart", "action: Reboot", 1)))
	if resp.Allowed {
		t.Fatal("invalid rules allowed")
	}
	if resp.Result == nil || resp.Result.Code != 422 || resp.Result.Reason != metav1.StatusReasonInvalid {
		t.Fatalf("result = %+v", resp.Result)
	}
	want := `spec.containers[0].restartPolicyRules[0].action: Unsupported value: "Reboot"`
	if !strings.Contains(resp.Result.Message, want) {
		t.Errorf("message %q does not contain %q", resp.Result.Message, want)
	}
	if strings.Contains(resp.Result.Message, "\n") {
		t.Errorf("message is not one line: %q", resp.Result.Message)
	}
}

// A container without command whose image cannot be looked up (no
// resolver): deny by default, or admit untouched with a warning.
func TestEntrypointFailurePolicy(t *testing.T) {
	noCommand := strings.Replace(nativePod, `command: ["python", "train.py"]`, `args: ["--epochs", "3"]`, 1)
	t.Run("deny", func(t *testing.T) {
		ts := startServer(t, newHandler())
		resp := admit(t, ts, podReview(t, noCommand))
		if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, `container "trainer"`) ||
			!strings.Contains(resp.Result.Message, "registry.test/app:1") {
			t.Fatalf("want denial naming container and image, got %+v", resp)
		}
	})
	t.Run("allow", func(t *testing.T) {
		h := newHandler()
		h.Entrypoint = EntrypointAllow
		ts := startServer(t, h)
		resp := admit(t, ts, podReview(t, noCommand))
		if !resp.Allowed || resp.Patch != nil {
			t.Fatalf("want allowed without patch, got %+v", resp)
		}
		if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "NOT applied") || !strings.Contains(resp.Warnings[0], "trainer") {
			t.Fatalf("warnings = %q", resp.Warnings)
		}
		if got := counter(t, ts.Metrics, ResultWarned); got != 1 {
			t.Errorf("warned counter = %v", got)
		}
	})
}

type fixedNative bool

func (f fixedNative) HonouredFor(NativeFeature) bool { return bool(f) }

// rulesOnlyNative honours restartPolicyRules but not RestartAllContainers,
// as a 1.35 cluster with default gates does.
type rulesOnlyNative struct{}

func (rulesOnlyNative) HonouredFor(f NativeFeature) bool { return f == FeatureRestartRules }

const restartAllPod = `
apiVersion: v1
kind: Pod
metadata: {name: gang}
spec:
  restartPolicy: Never
  containers:
  - name: worker
    image: registry.test/app:1
    command: [/app]
    restartPolicy: Never
    restartPolicyRules: [{action: RestartAllContainers, exitCodes: {operator: In, values: [88]}}]
  - {name: loader, image: registry.test/app:1, command: [/load]}
`

func TestNativeModes(t *testing.T) {
	annotated := `
apiVersion: v1
kind: Pod
metadata:
  name: annotated
  annotations:
    restart-supervisor.dev/rules: |
      app: {restartPolicy: Never, restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [3]}}]}
spec:
  restartPolicy: Never
  containers: [{name: app, image: registry.test/app:1, command: [/app]}]
`
	for _, tc := range []struct {
		mode                NativeMode
		state               NativeState
		pod                 string
		wantPatch, wantWarn bool
	}{
		{NativeOff, fixedNative(true), nativePod, true, false},
		{NativeAuto, fixedNative(false), nativePod, true, false},
		{NativeAuto, nil, nativePod, true, false},
		{NativeAuto, fixedNative(true), nativePod, false, false},
		{NativeAuto, fixedNative(true), annotated, true, false}, // the cluster never reads the annotation
		{NativeOn, fixedNative(false), nativePod, false, false},
		{NativeOn, fixedNative(false), annotated, false, true},
		// 1.35 defaults: rules honoured, RestartAllContainers not.
		{NativeAuto, rulesOnlyNative{}, nativePod, false, false},
		{NativeAuto, rulesOnlyNative{}, restartAllPod, true, false},
		{NativeAuto, fixedNative(true), restartAllPod, false, false},
	} {
		h := newHandler()
		h.Native, h.NativeState = tc.mode, tc.state
		ts := startServer(t, h)
		resp := admit(t, ts, podReview(t, tc.pod))
		if !resp.Allowed || (len(resp.Patch) > 0) != tc.wantPatch || (len(resp.Warnings) > 0) != tc.wantWarn {
			t.Errorf("mode %s state %v: allowed=%v patch=%v warnings=%q", tc.mode, tc.state, resp.Allowed, len(resp.Patch) > 0, resp.Warnings)
		}
		ts.Stop(t)
	}
}

func TestBadRequests(t *testing.T) {
	ts := startServer(t, newHandler())
	big := bytes.Repeat([]byte(" "), MaxRequestBytes+1)
	for _, tc := range []struct {
		name, method, ctype string
		body                []byte
		want                int
	}{
		{"GET", http.MethodGet, "", nil, http.StatusMethodNotAllowed},
		{"content type", http.MethodPost, "application/yaml", podReview(t, nativePod), http.StatusUnsupportedMediaType},
		{"no content type", http.MethodPost, "", podReview(t, nativePod), http.StatusUnsupportedMediaType},
		{"malformed", http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","request":`), http.StatusBadRequest},
		{"not an object", http.MethodPost, "application/json", []byte(`[1,2]`), http.StatusBadRequest},
		{"no request", http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), http.StatusBadRequest},
		{"v1beta1", http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`), http.StatusBadRequest},
		{"no uid", http.MethodPost, "application/json", withoutUID(t, podReview(t, nativePod)), http.StatusBadRequest},
		{"no apiVersion", http.MethodPost, "application/json", []byte(`{"kind":"AdmissionReview","request":{"uid":"x"}}`), http.StatusBadRequest},
		{"not a review", http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"Pod","request":{"uid":"x"}}`), http.StatusBadRequest},
		{"no kind", http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","request":{"uid":"x"}}`), http.StatusBadRequest},
		{"oversized", http.MethodPost, "application/json", big, http.StatusRequestEntityTooLarge},
	} {
		req, _ := http.NewRequest(tc.method, ts.URL, bytes.NewReader(tc.body))
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		resp, err := ts.Client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: HTTP %d, want %d (%s)", tc.name, resp.StatusCode, tc.want, msg)
		}
		if line := strings.TrimSuffix(string(msg), "\n"); line == "" || strings.Contains(line, "\n") {
			t.Errorf("%s: want a one-line message, got %q", tc.name, msg)
		}
	}

	// Well-formed reviews of the wrong thing get a well-formed denial.
	service := reviewOf(t, []byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"d"}}`), "Service", "services", admissionv1.Create)
	if resp := admit(t, ts, service); resp.Allowed || resp.Result.Code != 400 || !strings.Contains(resp.Result.Message, "Service") {
		t.Errorf("non-Pod: %+v", resp)
	}
	garbled := reviewOf(t, []byte(`{"apiVersion":"v1","kind":"Pod","spec":{"containers":"nope"}}`), "Pod", "pods", admissionv1.Create)
	if resp := admit(t, ts, garbled); resp.Allowed || resp.Result.Code != 400 || !strings.Contains(resp.Result.Message, "decode Pod") {
		t.Errorf("garbled pod: %+v", resp)
	}
	if resp := admit(t, ts, reviewOf(t, []byte(`{}`), "Pod", "pods", admissionv1.Update)); !resp.Allowed || resp.Patch != nil {
		t.Errorf("UPDATE: %+v", resp)
	}
	// The server is still healthy after all of it.
	if resp := admit(t, ts, podReview(t, nativePod)); !resp.Allowed || len(resp.Patch) == 0 {
		t.Errorf("after bad requests: %+v", resp)
	}
	if got := counter(t, ts.Metrics, ResultBadInput); got != 14 {
		t.Errorf("bad_request counter = %v, want 14", got)
	}
}

func TestTLSOnlyModernVersions(t *testing.T) {
	ts := startServer(t, newHandler())
	cfg := clientTLS(t, ts.CA.CertPEM)
	cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS11, tls.VersionTLS11
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	if _, err := c.Post(ts.URL, "application/json", bytes.NewReader(podReview(t, nativePod))); err == nil {
		t.Fatal("TLS 1.1 handshake succeeded")
	}
	plain := "http" + strings.TrimPrefix(ts.URL, "https")
	resp, err := http.Post(plain, "application/json", bytes.NewReader(podReview(t, nativePod)))
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("plain HTTP was served: %s", body)
		}
	}
}

// TestServesHTTP1Only: a client that offers HTTP/2 first, as the API
// server does for a webhook URL on loopback, is answered in HTTP/1.1.
func TestServesHTTP1Only(t *testing.T) {
	ts := startServer(t, newHandler())
	cfg := clientTLS(t, ts.CA.CertPEM)
	cfg.NextProtos = []string{"h2", "http/1.1"}
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Post(ts.URL, "application/json", bytes.NewReader(podReview(t, nativePod)))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Proto != "HTTP/1.1" || resp.TLS == nil || resp.TLS.NegotiatedProtocol != "http/1.1" {
		t.Errorf("served %s, ALPN %q; want HTTP/1.1 and http/1.1", resp.Proto, resp.TLS.NegotiatedProtocol)
	}
}

// slowMutator holds reviews until released, so a shutdown can begin while
// one is in flight.
type slowMutator struct {
	Mutator
	entered chan struct{}
	release chan struct{}
}

func (s slowMutator) PodPatchWith(ctx context.Context, pod *corev1.Pod, call injector.Call) (*injector.Result, error) {
	s.entered <- struct{}{}
	<-s.release
	return s.Mutator.PodPatchWith(ctx, pod, call)
}

func TestShutdownDrainsInFlightReviews(t *testing.T) {
	h := newHandler()
	sm := slowMutator{Mutator: h.Mutator, entered: make(chan struct{}), release: make(chan struct{})}
	h.Mutator = sm
	ts := startServer(t, h)

	var wg sync.WaitGroup
	var resp *admissionv1.AdmissionResponse
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp = admit(t, ts, podReview(t, nativePod))
	}()
	<-sm.entered
	stopped := make(chan struct{})
	go func() { ts.Stop(t); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("server stopped with a review in flight")
	case <-time.After(300 * time.Millisecond):
	}
	close(sm.release)
	wg.Wait()
	<-stopped
	if resp == nil || !resp.Allowed || len(resp.Patch) == 0 {
		t.Fatalf("in-flight review not completed: %+v", resp)
	}
	// New connections are refused once stopped.
	if _, err := ts.Client.Post(ts.URL, "application/json", bytes.NewReader(podReview(t, nativePod))); err == nil {
		t.Error("server still answering after shutdown")
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	h := newHandler()
	ts := startServer(t, h)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(ts.HealthURL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
	admit(t, ts, podReview(t, nativePod))
	resp, err := http.Get(ts.HealthURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`restart_injector_admission_reviews_total{result="injected"} 1`,
		`restart_injector_admission_duration_seconds_count 1`,
		`restart_injector_native_restart_rules 0`,
		`restart_injector_serving_certificate_expiry_timestamp_seconds`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// Not ready without a certificate.
	s := &Server{Handler: h, Certs: NewCertWatcher(t.TempDir(), nil, nil)}
	rec := httptestRecorder(s.HealthMux(), "/readyz")
	if rec != http.StatusServiceUnavailable {
		t.Errorf("/readyz without certificate: %d", rec)
	}
}

// panickingMutator fails like a bug would, for pods named "boom".
type panickingMutator struct{ Mutator }

func (p panickingMutator) PodPatchWith(ctx context.Context, pod *corev1.Pod, call injector.Call) (*injector.Result, error) {
	if pod.Name == "boom" {
		var m map[string]int
		m["boom"]++ //nolint:staticcheck // SA5000: the nil-map write is the panic under test
	}
	return p.Mutator.PodPatchWith(ctx, pod, call)
}

func TestPanicBecomesDenial(t *testing.T) {
	h := newHandler()
	h.Mutator = panickingMutator{h.Mutator}
	ts := startServer(t, h)
	resp := admit(t, ts, podReview(t, strings.Replace(nativePod, "name: trainer\n  namespace", "name: boom\n  namespace", 1)))
	if resp.Allowed || resp.Result == nil || resp.Result.Code != 500 || !strings.Contains(resp.Result.Message, "internal error") {
		t.Fatalf("%+v", resp)
	}
	// And the server goes on.
	if resp := admit(t, ts, podReview(t, nativePod)); !resp.Allowed || len(resp.Patch) == 0 {
		t.Fatalf("after a panic: %+v", resp)
	}
}

// withoutUID is review with request.uid removed.
func withoutUID(t testing.TB, review []byte) []byte {
	return editReview(t, review, func(r *admissionv1.AdmissionRequest) { r.UID = "" })
}

// editReview is review with edit applied to its request.
func editReview(t testing.TB, review []byte, edit func(*admissionv1.AdmissionRequest)) []byte {
	t.Helper()
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(review, &r); err != nil {
		t.Fatal(err)
	}
	edit(r.Request)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rerunPod restarts all containers and has a regular init container:
// with limits on every container (LIMITS) it gets no re-run sidecar.
const rerunPod = `
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: ml}
spec:
  restartPolicy: Never
  initContainers:
  - name: fetch
    image: registry.test/app:1
    command: ["/fetch"]
    resources: LIMITS
  containers:
  - name: trainer
    image: registry.test/app:1
    command: ["python", "train.py"]
    resources: LIMITS
    restartPolicy: Never
    restartPolicyRules:
    - action: RestartAllContainers
      exitCodes: {operator: In, values: [88]}
`

// The webhook's patch adds the re-run sidecar of an init container right
// after it, and passes the injector's warning on when it adds none.
func TestRerunSidecarThroughWebhook(t *testing.T) {
	ts := startServer(t, newHandler())
	raw, _ := yaml.YAMLToJSON([]byte(strings.ReplaceAll(rerunPod, "LIMITS", "{requests: {cpu: 100m}}")))
	resp := admit(t, ts, reviewOf(t, raw, "Pod", "pods", admissionv1.Create))
	if !resp.Allowed {
		t.Fatalf("denied: %+v", resp.Result)
	}
	out, pod := applyPatch(t, raw, resp)
	var names []string
	for _, c := range pod.Spec.InitContainers {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != contract.InstallContainer+",fetch,fetch-rerun" {
		t.Fatalf("init containers %q", names)
	}
	rc := pod.Spec.InitContainers[2]
	if rc.RestartPolicy == nil || *rc.RestartPolicy != corev1.ContainerRestartPolicyAlways || rc.Command[0] != contract.SupervisorPath ||
		len(rc.Resources.Requests) != 0 || rc.ReadinessProbe != nil {
		t.Errorf("re-run sidecar: %+v", rc)
	}
	members := ""
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == contract.EnvPodMembers && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
			e.ValueFrom.FieldRef.FieldPath == contract.PodMembersFieldPath {
			members = pod.Annotations[contract.AnnotationPodMembers]
		}
	}
	if members != "fetch-rerun:init,trainer:regular" {
		t.Errorf("members %q", members)
	}
	again := admit(t, ts, reviewOf(t, out, "Pod", "pods", admissionv1.Create))
	if !again.Allowed || len(again.Patch) != 0 {
		t.Errorf("second pass: allowed=%v patch=%s", again.Allowed, again.Patch)
	}

	raw, _ = yaml.YAMLToJSON([]byte(strings.ReplaceAll(rerunPod, "LIMITS", "{limits: {cpu: 100m, memory: 64Mi}}")))
	resp = admit(t, ts, reviewOf(t, raw, "Pod", "pods", admissionv1.Create))
	if !resp.Allowed {
		t.Fatalf("denied: %+v", resp.Result)
	}
	if _, pod = applyPatch(t, raw, resp); len(pod.Spec.InitContainers) != 2 {
		t.Errorf("init containers of a pod whose containers all declare limits: %d, want 2", len(pod.Spec.InitContainers))
	}
	want := `pod "ml/trainer": init container "fetch" is not run again on a pod restart`
	if len(resp.Warnings) != 1 || !strings.HasPrefix(resp.Warnings[0], want) {
		t.Errorf("warnings %q, want one starting %q", resp.Warnings, want)
	}
}

// TestMirrorPodsAreLeftAlone: the kubelet creates a mirror pod in the API
// for each static pod it runs from a manifest on its disk
// (annotation kubernetes.io/config.mirror); it never runs the mirror's
// spec. A patch would make the API show wrapped containers that do not
// run, so the webhook admits it untouched and says what to do instead.
func TestMirrorPodsAreLeftAlone(t *testing.T) {
	mirror := strings.Replace(nativePod, "metadata:\n", "metadata:\n  annotations: {kubernetes.io/config.mirror: 0123abcd}\n", 1)
	if mirror == nativePod {
		t.Fatal("the test pod has no metadata line to annotate")
	}
	ts := startServer(t, newHandler())
	defer ts.Stop(t)
	if resp := admit(t, ts, podReview(t, nativePod)); len(resp.Patch) == 0 {
		t.Fatal("the same pod without the annotation is not injected: the test shows nothing")
	}
	resp := admit(t, ts, podReview(t, mirror))
	if !resp.Allowed || len(resp.Patch) != 0 || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "restart-injector inject") {
		t.Fatalf("mirror pod: allowed=%v patch=%d bytes warnings=%q, want allowed untouched with one warning", resp.Allowed, len(resp.Patch), resp.Warnings)
	}
}
