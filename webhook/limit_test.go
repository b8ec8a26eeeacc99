package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/restart-supervisor/restart-supervisor/imagelookup/registry"
	"github.com/restart-supervisor/restart-supervisor/injector"
)

func TestMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	defer func(p string) { cgroupMemoryMax = p }(cgroupMemoryMax)
	write := func(s string) {
		cgroupMemoryMax = filepath.Join(dir, "memory.max")
		if err := os.WriteFile(cgroupMemoryMax, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(EnvMemoryLimit, "")
	write("268435456\n")
	if n, from, err := MemoryLimit(); n != 256<<20 || from != cgroupMemoryMax || err != nil {
		t.Errorf("memory.max 256Mi: %d %q %v", n, from, err)
	}
	write("max\n")
	if n, _, err := MemoryLimit(); n != 0 || err != nil {
		t.Errorf("memory.max max: %d %v", n, err)
	}
	write(strings.Repeat("9", 100))
	if n, _, err := MemoryLimit(); n != 0 || err == nil {
		t.Errorf("memory.max garbage: %d %v", n, err)
	}
	cgroupMemoryMax = filepath.Join(dir, "absent")
	if n, _, err := MemoryLimit(); n != 0 || err != nil {
		t.Errorf("no cgroup v2: %d %v", n, err)
	}
	t.Setenv(EnvMemoryLimit, "536870912")
	if n, from, err := MemoryLimit(); n != 512<<20 || from != EnvMemoryLimit || err != nil {
		t.Errorf("%s: %d %q %v", EnvMemoryLimit, n, from, err)
	}
	t.Setenv(EnvMemoryLimit, "512Mi")
	if _, _, err := MemoryLimit(); err == nil {
		t.Errorf("%s=512Mi: no error", EnvMemoryLimit)
	}
	for limit, want := range map[int64]int{0: DefaultInFlight, 128 << 20: MinInFlight, 256 << 20: 12, 1 << 30: 60} {
		if got := MaxInFlightFor(limit); got != want {
			t.Errorf("MaxInFlightFor(%d) = %d, want %d", limit, got, want)
		}
	}
}

// TuneMemory sets the runtime's soft limit and GOGC only where serve
// knows the container's limit and the operator set neither; what it set is
// what the runtime then reports.
func TestTuneMemory(t *testing.T) {
	oldGC := debug.SetGCPercent(100)
	oldLimit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(oldGC); debug.SetMemoryLimit(oldLimit) })
	reset := func() { debug.SetGCPercent(100); debug.SetMemoryLimit(math.MaxInt64) }

	for _, tc := range []struct {
		name          string
		limit         int64
		gogc, memlim  string
		want          MemoryTuning
		wantGC        int
		wantSoftLimit int64
	}{
		{"no limit", 0, "", "", MemoryTuning{}, 100, math.MaxInt64},
		{"256Mi", 256 << 20, "", "", MemoryTuning{SoftLimit: 256 << 20 / 10 * 8, GCPercent: ServeGCPercent}, ServeGCPercent, 256 << 20 / 10 * 8},
		{"GOGC set", 256 << 20, "200", "", MemoryTuning{SoftLimit: 256 << 20 / 10 * 8}, 100, 256 << 20 / 10 * 8},
		{"GOMEMLIMIT set", 256 << 20, "", "1GiB", MemoryTuning{}, 100, math.MaxInt64},
	} {
		reset()
		t.Setenv("GOGC", tc.gogc)
		t.Setenv("GOMEMLIMIT", tc.memlim)
		if got := TuneMemory(tc.limit); got != tc.want {
			t.Errorf("%s: TuneMemory = %+v, want %+v", tc.name, got, tc.want)
		}
		if gc := debug.SetGCPercent(100); gc != tc.wantGC {
			t.Errorf("%s: GOGC %d, want %d", tc.name, gc, tc.wantGC)
		}
		if lim := debug.SetMemoryLimit(-1); lim != tc.wantSoftLimit {
			t.Errorf("%s: soft limit %d, want %d", tc.name, lim, tc.wantSoftLimit)
		}
	}
}

// stallingRegistry answers nothing until release is closed, and counts
// the lookups waiting on it.
type stallingRegistry struct {
	srv     *httptest.Server
	waiting atomic.Int64
	arrived chan struct{}
	release chan struct{}
}

func newStallingRegistry(t *testing.T) *stallingRegistry {
	r := &stallingRegistry{arrived: make(chan struct{}, 1024), release: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.waiting.Add(1)
		r.arrived <- struct{}{}
		<-r.release
		http.NotFound(w, req)
	}))
	t.Cleanup(func() {
		select {
		case <-r.release:
		default:
			close(r.release)
		}
		r.srv.Close()
	})
	return r
}

// bigLookupReview is a review of about 3 MiB: a pod whose container has no
// command (its image is looked up on host) and a large annotation.
func bigLookupReview(t *testing.T, host string, i int) []byte {
	never := corev1.ContainerRestartPolicyNever
	pod := corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", i), Namespace: "apps",
			Annotations: map[string]string{"bulk": strings.Repeat("x", 3<<20-4<<10)}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "app", Image: fmt.Sprintf("%s/app-%d:1", host, i), RestartPolicy: &never,
			RestartPolicyRules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
				ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{3}}}},
		}}},
	}
	raw, _ := json.Marshal(pod)
	return reviewOf(t, raw, "Pod", "pods", "CREATE")
}

// M2: nothing bounded the reviews in flight: 100 concurrent 3 MB reviews
// took the webhook to 334 MiB, 400 to 827 MiB. With MaxInFlight 4, 24
// concurrent 3 MiB reviews whose lookups stall leave 4 in flight; the other
// 20 get 429 with Retry-After at once, and the heap holds 4 reviews.
func TestInFlightBounded(t *testing.T) {
	const inFlight, clients = 4, 24
	reg := newStallingRegistry(t)
	host := strings.TrimPrefix(reg.srv.URL, "http://")
	h := &Handler{Mutator: injector.New(injector.Options{SupervisorImage: "example.test/restart-supervisor:test",
		Resolver: registry.New(registry.Options{InsecureRegistries: []string{host}, Timeout: time.Minute})}),
		Entrypoint: EntrypointDeny, Native: NativeOff}
	h.Metrics, h.Log = NewMetrics(), testLogger(t)
	ts := startServerOpts(t, h, h.Metrics, h.Log, func(s *Server) { s.MaxInFlight = inFlight })

	reviews := make([][]byte, clients)
	for i := range reviews {
		reviews[i] = bigLookupReview(t, host, i)
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	type answer struct {
		code       int
		retryAfter string
	}
	answers := make(chan answer, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := ts.Client.Post(ts.URL+"?timeout=30s", "application/json", bytes.NewReader(reviews[i]))
			if err != nil {
				t.Error(err)
				answers <- answer{}
				return
			}
			defer resp.Body.Close()
			var out bytes.Buffer
			_, _ = out.ReadFrom(resp.Body)
			answers <- answer{resp.StatusCode, resp.Header.Get("Retry-After")}
		}()
	}
	// Every review beyond the bound is answered while the others stall:
	// all 20 answers, and 4 lookups waiting, in whatever order.
	busy := 0
	for busy < clients-inFlight || reg.waiting.Load() < inFlight {
		select {
		case a := <-answers:
			if a.code != http.StatusTooManyRequests || a.retryAfter != "1" {
				t.Fatalf("a review answered %d (Retry-After %q) while %d lookups stall", a.code, a.retryAfter, reg.waiting.Load())
			}
			busy++
		case <-reg.arrived:
			if n := reg.waiting.Load(); n > inFlight {
				t.Fatalf("%d reviews in flight, more than %d", n, inFlight)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%d answers, %d lookups waiting after a minute", busy, reg.waiting.Load())
		}
	}
	var held runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&held)
	heap := int64(held.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d of %d reviews of %d bytes answered 429; %d in flight hold %.1f MiB of heap (%.1f MiB each)",
		busy, clients, len(reviews[0]), inFlight, float64(heap)/(1<<20), float64(heap)/inFlight/(1<<20))
	if heap > inFlight*ReviewMemory {
		t.Errorf("%d reviews in flight hold %d MiB, more than %d × ReviewMemory", inFlight, heap>>20, inFlight)
	}
	if n := counter(t, h.Metrics, ResultBusy); n != clients-inFlight {
		t.Errorf("busy counter %v, want %d", n, clients-inFlight)
	}

	close(reg.release)
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.code != http.StatusOK {
			t.Errorf("a review in flight answered %d once its lookup ended", a.code)
		}
	}
	// The slots are free again.
	resp, _ := post(t, ts, "application/json", podReview(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: apps}\nspec: {containers: [{name: a, image: a}]}\n"))
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after the stall: HTTP %d", resp.StatusCode)
	}
}
