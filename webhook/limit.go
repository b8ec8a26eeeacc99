package webhook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ReviewMemory is the peak memory one review is taken to need, to size the
// reviews in flight to the memory limit: a body of up to MaxRequestBytes
// (3 MiB), the pod decoded from it (about twice its JSON), the patch (at
// most MaxPatchBytes) and the response that carries it base64-encoded,
// and an image lookup's capped reads (four configs of at most 1 MiB at a
// time). Measured: a review of a 3 MiB pod whose image lookup is held
// keeps 4.9 MiB of heap live (TestInFlightBounded); 16 MiB leaves room
// for the garbage of its decoding and for a lookup's reads.
const ReviewMemory = 16 << 20

// reservedMemory is what the process needs besides reviews: the runtime,
// the image cache (at most 16 MiB of commands), the informers of native
// mode, TLS state, the bodies being read before they get a slot
// (BodiesBeingRead, 6 MiB).
const reservedMemory = 64 << 20

// MinInFlight and DefaultInFlight bound MaxInFlightFor: at least a few
// reviews run on any limit, and without a known limit as many as a 256 MiB
// container holds.
const (
	MinInFlight     = 4
	DefaultInFlight = 12
)

// MaxInFlightFor is the reviews in flight that a memory limit of limit
// bytes holds: (limit − 64 MiB) / ReviewMemory, at least MinInFlight;
// DefaultInFlight when limit is 0 (unknown).
func MaxInFlightFor(limit int64) int {
	if limit <= 0 {
		return DefaultInFlight
	}
	return max(MinInFlight, int((limit-reservedMemory)/ReviewMemory))
}

// limitInFlight answers 429 Too Many Requests, with Retry-After: 1, to a
// review that arrives while n others are in flight. The API server's
// webhook client is client-go's REST client, which retries a 429 that
// carries Retry-After, up to 10 times within the webhook's timeout
// (client-go v0.34.4 rest/with_retry.go checkWait, rest/request.go
// maxRetries).
//
// A review's body is read before a slot is taken (readBody), under its
// own budget of time (BodyReadTimeout) and of bytes (readBudget, shared by
// every body being read): /mutate is reachable from any pod, and a client
// that sends its body a byte at a time would otherwise hold a slot for
// the server's whole read timeout, and a few of them every slot. The API
// server sends a review at once, in milliseconds.
func limitInFlight(h http.Handler, n int, m *Metrics) http.Handler {
	slots := make(chan struct{}, n)
	budget := &byteBudget{max: BodiesBeingRead}
	busy := func(w http.ResponseWriter, why string) {
		if m != nil {
			m.Reviews.WithLabelValues(ResultBusy).Inc()
		}
		w.Header().Set("Retry-After", "1")
		http.Error(w, "restart-injector: "+why+"; retry", http.StatusTooManyRequests)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, taken, err := readBody(w, r, budget)
		budget.give(taken) // from here the body is the slot's, or dropped
		var tooBig *http.MaxBytesError
		switch {
		case errors.Is(err, errReadBudget):
			busy(w, fmt.Sprintf("%d bytes of request bodies being read, the most its memory holds", BodiesBeingRead))
			return
		case errors.As(err, &tooBig):
			http.Error(w, fmt.Sprintf("request body exceeds %d bytes", MaxRequestBytes), http.StatusRequestEntityTooLarge)
			return
		case err != nil:
			http.Error(w, fmt.Sprintf("read request body within %s: %v", BodyReadTimeout, err), http.StatusRequestTimeout)
			return
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			h.ServeHTTP(w, r)
		default:
			busy(w, fmt.Sprintf("%d reviews in flight, the most its memory holds", n))
		}
	})
}

// BodyReadTimeout bounds the read of a review's body, from the end of its
// headers (which ReadHeaderTimeout bounds): the API server writes a review
// of at most 3 MiB at once.
const BodyReadTimeout = 5 * time.Second

// BodiesBeingRead bounds the bytes of request bodies read and not yet
// handed to a slot, all requests together: room for two reviews of the
// largest size at once, within reservedMemory. A slow client holds only
// the bytes it has sent.
const BodiesBeingRead = 2 * MaxRequestBytes

var errReadBudget = errors.New("the bytes of request bodies being read are at their bound")

// readBody reads r's body, at most MaxRequestBytes, within BodyReadTimeout,
// taking from budget every byte of the buffer it grows to hold it; it
// returns what it took, to be given back.
func readBody(w http.ResponseWriter, r *http.Request, budget *byteBudget) (body []byte, taken int64, err error) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(BodyReadTimeout))
	src := http.MaxBytesReader(w, r.Body, MaxRequestBytes)
	// The buffer grows only as bytes arrive, never on the length the
	// client announces: a slow client that announces 3 MiB and sends a
	// byte holds 4 KiB of the budget. The bytes are read straight into
	// it, with no chunk between.
	for {
		if len(body) == cap(body) {
			grown := min(max(2*cap(body), 4<<10), MaxRequestBytes+bytes.MinRead)
			if !budget.take(int64(grown - cap(body))) {
				return nil, taken, errReadBudget
			}
			taken += int64(grown - cap(body))
			body = append(make([]byte, 0, grown), body...)
		}
		k, rerr := src.Read(body[len(body):cap(body)])
		body = body[:len(body)+k]
		switch {
		case rerr == io.EOF:
			return body, taken, nil
		case rerr != nil:
			return nil, taken, rerr
		}
	}
}

// byteBudget is a count of bytes held against a bound.
type byteBudget struct {
	mu        sync.Mutex
	used, max int64
}

func (b *byteBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

func (b *byteBudget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// EnvMemoryLimit is the container's memory limit in bytes, set from the
// downward API (resourceFieldRef limits.memory): it sizes GOMEMLIMIT and
// the reviews in flight. Without it, the cgroup's memory.max is read.
const EnvMemoryLimit = "RESTART_INJECTOR_MEMORY_LIMIT"

// cgroupMemoryMax is cgroup v2's memory limit of the process's cgroup as
// the container sees it (the cgroup namespace makes it the root).
var cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// MemoryLimit returns the container's memory limit in bytes and where it
// was found: EnvMemoryLimit, else cgroup v2's memory.max (read at most 64
// bytes, a regular file only), else 0. "max" is no limit.
func MemoryLimit() (int64, string, error) {
	if v := os.Getenv(EnvMemoryLimit); v != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n <= 0 {
			return 0, EnvMemoryLimit, fmt.Errorf("%s=%.32q: want a positive number of bytes", EnvMemoryLimit, v)
		}
		return n, EnvMemoryLimit, nil
	}
	f, err := os.OpenFile(cgroupMemoryMax, os.O_RDONLY|cgroupOpenFlags, 0)
	if err != nil {
		return 0, "", nil // no cgroup v2: no known limit
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return 0, "", nil
	}
	b, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return 0, "", nil
	}
	s := string(bytes.TrimSpace(b))
	if s == "max" {
		return 0, "", nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, cgroupMemoryMax, fmt.Errorf("%s: %.32q: not a number of bytes", cgroupMemoryMax, s)
	}
	return n, cgroupMemoryMax, nil
}

// ServeGCPercent is the collector's GOGC in serve when serve set the soft
// memory limit and GOGC is not set. A webhook's live heap is small (about
// 3 MB between reviews) and each injected review leaves about 63 KB of
// garbage, so at the runtime's default of 100 the collector runs about 15
// times a second at 1,000 reviews/s, and each run stops the world: on
// cores the server shares with others, 0.2 ms a run on average and up to
// 3 ms, which was half of the webhook's p99 (bench/webhook,
// docs/benchmarks.md). At 1000 the heap grows to 11 times its live size
// before a collection: 16 times fewer collections (55 against 853–923 in
// 60,000 reviews), for a resident set of 63–92 MiB under that load
// against 29–35. The soft limit still caps the heap, so a live heap near
// the bound of the reviews in flight is collected as before, never past
// the limit (TestServeMemoryUnderHostileReviews).
const ServeGCPercent = 1000

// MemoryTuning is the runtime's memory policy TuneMemory set: the soft
// limit in bytes and GOGC, 0 each where it left the runtime's own.
type MemoryTuning struct {
	SoftLimit int64
	GCPercent int
}

// TuneMemory sets the Go runtime's memory policy for a webhook whose
// container may use limit bytes (0: unknown). With a limit it sets the
// soft memory limit to 80 % of it unless GOMEMLIMIT is set, so that the
// collector works harder before the kernel's OOM killer would, and, with
// that limit in force and GOGC unset, GOGC to ServeGCPercent. Without a
// known limit it changes nothing: the heap would have no cap.
//
// 80 %, not 90 %: the soft limit counts only what the Go runtime maps,
// and the process's resident set has about 25 MiB more (the binary's text
// and data). Under a flood of 3 MiB reviews a 256 MiB container peaked at
// 248–252 MiB with 90 %, at 222–231 MiB with 80 %.
func TuneMemory(limit int64) MemoryTuning {
	var t MemoryTuning
	if limit <= 0 {
		return t
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		t.SoftLimit = limit / 10 * 8
		debug.SetMemoryLimit(t.SoftLimit)
	}
	if t.SoftLimit > 0 && os.Getenv("GOGC") == "" {
		t.GCPercent = ServeGCPercent
		debug.SetGCPercent(t.GCPercent)
	}
	return t
}
