package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/restart-supervisor/restart-supervisor/webhook"
)

// TestServeMemoryUnderHostileReviews: serve's memory policy (a soft limit
// at 90 % of the container's, GOGC raised to webhook.ServeGCPercent under
// it) keeps the real binary's peak resident set within the container's
// limit while every pod author sends the largest review there is, as
// fast as the webhook answers. The limit comes as the chart gives it
// (RESTART_INJECTOR_MEMORY_LIMIT, 256 MiB); what a review may hold is
// bounded by the reviews in flight it sizes (12). The same load under the
// runtime's own GOGC=100 is run beside it for the record. Without the soft
// limit (GOMEMLIMIT=off GOGC=off) the same load takes the process past
// the limit, which is what this test would see if the policy were lost.
func TestServeMemoryUnderHostileReviews(t *testing.T) {
	if testing.Short() {
		t.Skip("sends about 600 MB of reviews")
	}
	const limit = 256 << 20
	review := hugeReview(t)
	for _, tc := range []struct {
		name     string
		env      []string
		wantGOGC string
	}{
		{"serve's policy", nil, fmt.Sprint(webhook.ServeGCPercent)},
		{"GOGC=100", []string{"GOGC=100"}, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServe(t, append([]string{fmt.Sprintf("%s=%d", webhook.EnvMemoryLimit, limit)}, tc.env...))
			if got := srv.logValue("gogc"); got != tc.wantGOGC {
				t.Errorf("serve logged gogc=%s, want %s", got, tc.wantGOGC)
			}
			ok, busy := srv.flood(t, review, 32, 6)
			rss := srv.stop(t)
			t.Logf("%s: %d reviews of %d bytes injected, %d answered 429; peak RSS %.1f MiB of a %d MiB limit",
				tc.name, ok, len(review), busy, float64(rss)/(1<<20), limit>>20)
			if ok == 0 {
				t.Fatalf("no review was injected")
			}
			if rss > limit {
				t.Errorf("peak RSS %.1f MiB: past the %d MiB limit the kernel would kill at", float64(rss)/(1<<20), limit>>20)
			}
		})
	}
}

// hugeReview is an AdmissionReview of a pod with a restart rule and an
// annotation that takes it to just under the webhook's 3 MiB bound.
func hugeReview(t *testing.T) []byte {
	t.Helper()
	never := corev1.ContainerRestartPolicyNever
	pod := corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "huge", Namespace: "apps",
			Annotations: map[string]string{"bulk": strings.Repeat("x", 3<<20-8<<10)}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "app", Image: "registry.test/app:1", Command: []string{"/app"}, RestartPolicy: &never,
			RestartPolicyRules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
				ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{3}}}},
		}}},
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "huge", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: "apps",
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// served is a running `restart-injector serve`: its process, its log up to
// "serving", and a client that trusts its certificate.
type served struct {
	cmd    *exec.Cmd
	log    []string
	url    string
	client *http.Client
	rest   sync.WaitGroup
}

func startServe(t *testing.T, env []string) *served {
	t.Helper()
	dir := t.TempDir()
	ca, err := webhook.NewCA("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := webhook.NewServingCert(ca, nil, []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := webhook.WriteKeyPair(dir, cert, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	s := &served{cmd: exec.Command(injectorBinary(t), "serve", "--native=off", "--registry-lookup=false",
		"--cert-dir", dir, "--listen", "127.0.0.1:0", "--health-listen", "127.0.0.1:0",
		"--shutdown-delay=0", "--log-format=text", "--supervisor-image", "registry.test/restart-supervisor:v0.1.0")}
	s.cmd.Env = append(withoutGoEnv(), env...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	})
	serving := regexp.MustCompile(`msg=serving mutate=(\S+)`)
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		s.log = append(s.log, sc.Text())
		if m := serving.FindStringSubmatch(sc.Text()); m != nil {
			s.url = m[1]
			break
		}
	}
	if s.url == "" {
		t.Fatalf("serve never served:\n%s", strings.Join(s.log, "\n"))
	}
	s.rest.Add(1)
	go func() { defer s.rest.Done(); _, _ = io.Copy(io.Discard, stderr) }()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	s.client = &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 64}}
	return s
}

// withoutGoEnv is the test's environment less the runtime's GOGC and
// GOMEMLIMIT, so that each case sets its own.
func withoutGoEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			env = append(env, kv)
		}
	}
	return env
}

// logValue is key's value in serve's "memory" log line.
func (s *served) logValue(key string) string {
	value := regexp.MustCompile(`\b` + regexp.QuoteMeta(key) + `=(\S+)`)
	for _, l := range s.log {
		if strings.Contains(l, "msg=memory ") {
			if m := value.FindStringSubmatch(l); m != nil {
				return m[1]
			}
		}
	}
	return ""
}

// flood sends review from clients goroutines, each until it has had each
// of its rounds answered 200 or 429, and counts the injected and the busy.
func (s *served) flood(t *testing.T, review []byte, clients, rounds int) (ok, busy int64) {
	t.Helper()
	var wg sync.WaitGroup
	var okN, busyN atomic.Int64
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				resp, err := s.client.Post(s.url+"?timeout=30s", "application/json", bytes.NewReader(review))
				if err != nil {
					t.Error(err)
					return
				}
				var rev admissionv1.AdmissionReview
				derr := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&rev)
				resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusTooManyRequests:
					busyN.Add(1)
				case resp.StatusCode != http.StatusOK || derr != nil:
					t.Errorf("HTTP %d, %v", resp.StatusCode, derr)
					return
				case rev.Response == nil || !rev.Response.Allowed || len(rev.Response.Patch) == 0:
					t.Errorf("the review was not injected: %+v", rev.Response)
					return
				default:
					okN.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return okN.Load(), busyN.Load()
}

// stop ends serve with SIGTERM and returns its peak resident set in bytes.
func (s *served) stop(t *testing.T) int64 {
	t.Helper()
	s.client.CloseIdleConnections()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	s.rest.Wait()
	if err := s.cmd.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v", err)
	}
	return s.cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
}
