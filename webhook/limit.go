package webhook

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
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
// mode, TLS state.
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
// review that arrives while n others are in flight, having read and
// dropped its body (so that an HTTP/1.1 client reads the answer) without
// keeping it. The API server's webhook client is client-go's REST client,
// which retries a 429 that carries Retry-After, up to 10 times within the
// webhook's timeout (client-go v0.34.4 rest/with_retry.go checkWait,
// rest/request.go maxRetries).
func limitInFlight(h http.Handler, n int, m *Metrics) http.Handler {
	slots := make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			h.ServeHTTP(w, r)
		default:
			_, _ = io.CopyN(io.Discard, r.Body, MaxRequestBytes)
			if m != nil {
				m.Reviews.WithLabelValues(ResultBusy).Inc()
			}
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("restart-injector: %d reviews in flight, the most its memory holds; retry", n), http.StatusTooManyRequests)
		}
	})
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
	f, err := os.OpenFile(cgroupMemoryMax, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
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

// setMemoryLimit sets the Go runtime's soft memory limit to 90 % of limit
// unless GOMEMLIMIT is set (the runtime has read it then), so that the
// collector works harder before the kernel's OOM killer would. It returns
// the limit set, 0 when none.
func setMemoryLimit(limit int64) int64 {
	if limit <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	soft := limit / 10 * 9
	debug.SetMemoryLimit(soft)
	return soft
}
