package probe

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

func portOf(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return int32(n)
}

// server answers /code/NNN with status NNN, /slow after 3 s, and records
// the last request.
func server(t *testing.T, tlsOn bool) (*httptest.Server, *http.Request) {
	var last http.Request
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last = *r.Clone(context.Background())
		switch {
		case r.URL.Path == "/slow":
			select {
			case <-time.After(3 * time.Second):
			case <-r.Context().Done():
			}
		case strings.HasPrefix(r.URL.Path, "/code/"):
			code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/code/"))
			if code == http.StatusFound {
				w.Header().Set("Location", "/code/500")
			}
			w.WriteHeader(code)
		}
	})
	var s *httptest.Server
	if tlsOn {
		s = httptest.NewTLSServer(h) // a self-signed certificate
	} else {
		s = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	return s, &last
}

func httpProbe(scheme string, port int32, path string, headers ...rules.HTTPHeader) *rules.Probe {
	return &rules.Probe{HTTPGet: &rules.HTTPGetAction{Scheme: scheme, Port: port, Path: path, HTTPHeaders: headers}, TimeoutSeconds: 1}
}

func TestHTTPGet(t *testing.T) {
	for _, scheme := range []string{"HTTP", "HTTPS"} {
		s, last := server(t, scheme == "HTTPS")
		port := portOf(t, s.Listener.Addr().String())
		for _, tc := range []struct {
			path string
			ok   bool
		}{{"/code/200", true}, {"/code/204", true}, {"/code/302", true}, {"/code/399", true},
			{"/code/400", false}, {"/code/500", false}, {"/slow", false}} {
			start := time.Now()
			err := Check(context.Background(), httpProbe(scheme, port, tc.path), nil)
			if (err == nil) != tc.ok {
				t.Errorf("%s %s: err = %v, want ok=%v", scheme, tc.path, err, tc.ok)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("%s %s: error of more than one line: %q", scheme, tc.path, err)
			}
			if tc.path == "/slow" && time.Since(start) > 2500*time.Millisecond {
				t.Errorf("%s /slow: the 1 s timeout took %s", scheme, time.Since(start))
			}
		}
		err := Check(context.Background(), httpProbe(scheme, port, "code/200?x=1",
			rules.HTTPHeader{Name: "X-Probe", Value: "liveness"}, rules.HTTPHeader{Name: "Host", Value: "app.example"}), nil)
		if err != nil {
			t.Fatalf("%s: %v", scheme, err)
		}
		if last.URL.Path != "/code/200" || last.URL.RawQuery != "x=1" || last.Header.Get("X-Probe") != "liveness" ||
			last.Host != "app.example" || !strings.HasPrefix(last.UserAgent(), "kube-probe/") {
			t.Errorf("%s: request %s %q host %q headers %v", scheme, last.URL.Path, last.URL.RawQuery, last.Host, last.Header)
		}
	}
}

// TestHTTPSchemeMismatchFails: an HTTPS check against a plain server (and
// the reverse) fails rather than passing by accident.
func TestHTTPSchemeMismatchFails(t *testing.T) {
	plain, _ := server(t, false)
	secure, _ := server(t, true)
	if err := Check(context.Background(), httpProbe("HTTPS", portOf(t, plain.Listener.Addr().String()), "/code/200"), nil); err == nil {
		t.Error("HTTPS check of a plain server succeeded")
	}
	if err := Check(context.Background(), httpProbe("HTTP", portOf(t, secure.Listener.Addr().String()), "/code/200"), nil); err == nil {
		t.Error("HTTP check of a TLS server succeeded")
	}
}

func TestTCPSocket(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := portOf(t, l.Addr().String())
	p := &rules.Probe{TCPSocket: &rules.TCPSocketAction{Port: port}}
	if err := Check(context.Background(), p, nil); err != nil {
		t.Fatalf("open port: %v", err)
	}
	l.Close()
	if err := Check(context.Background(), p, nil); err == nil || !strings.Contains(err.Error(), "127.0.0.1:"+strconv.Itoa(int(port))) {
		t.Fatalf("closed port: err = %v", err)
	}
}

func TestExecAndGRPC(t *testing.T) {
	ok := &rules.Probe{Exec: &rules.ExecAction{Command: []string{"sh", "-c", `test "$X" = 1`}}}
	if err := Check(context.Background(), ok, []string{"X=1"}); err != nil {
		t.Errorf("exec with the environment: %v", err)
	}
	if err := Check(context.Background(), ok, []string{"X=2"}); err == nil {
		t.Error("failing exec succeeded")
	}
	start := time.Now()
	slow := &rules.Probe{Exec: &rules.ExecAction{Command: []string{"sleep", "10"}}, TimeoutSeconds: 1}
	if err := Check(context.Background(), slow, nil); err == nil || !strings.Contains(err.Error(), "timed out after 1s") {
		t.Errorf("slow exec: err = %v", err)
	}
	if time.Since(start) > 8*time.Second {
		t.Errorf("the 1 s timeout took %s", time.Since(start))
	}
}

// TestGRPCCheck runs the check against a real grpc.health.v1 server on
// loopback: SERVING passes; NOT_SERVING, an unknown service, a server
// without the health service and no server at all fail, each saying why.
func TestGRPCCheck(t *testing.T) {
	serve := func(t *testing.T, withHealth bool) (int32, *health.Server) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		hs := health.NewServer()
		if withHealth {
			healthpb.RegisterHealthServer(srv, hs)
		}
		go srv.Serve(ln)
		t.Cleanup(srv.Stop)
		return int32(ln.Addr().(*net.TCPAddr).Port), hs
	}
	check := func(port int32, service string) error {
		a := &rules.GRPCAction{Port: port}
		if service != "" {
			a.Service = &service
		}
		return Check(context.Background(), &rules.Probe{GRPC: a, TimeoutSeconds: 2}, nil)
	}
	port, hs := serve(t, true)
	hs.SetServingStatus("trainer", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("loader", healthpb.HealthCheckResponse_NOT_SERVING)
	if err := check(port, ""); err != nil {
		t.Errorf("overall health SERVING: %v", err)
	}
	if err := check(port, "trainer"); err != nil {
		t.Errorf("service trainer SERVING: %v", err)
	}
	if err := check(port, "loader"); err == nil || !strings.Contains(err.Error(), "NOT_SERVING") {
		t.Errorf("service loader NOT_SERVING: err = %v", err)
	}
	if err := check(port, "unknown"); err == nil {
		t.Error("unknown service passed")
	}
	bare, _ := serve(t, false)
	if err := check(bare, ""); err == nil || !strings.Contains(err.Error(), "does not implement grpc.health.v1.Health") {
		t.Errorf("server without the health service: err = %v", err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := int32(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	if err := check(closed, ""); err == nil {
		t.Error("no server: passed")
	}
}

// TestHTTPBodyErrorIsDiscarded: a server that sends 200 and its headers,
// then stalls until the check's timeout, errors the check as the kubelet's
// DoHTTPProbe does (the body read fails, pkg/probe/http/http.go v1.37.2):
// neither a success nor a failure. A body longer than the 10 KiB read is
// truncated, which is harmless.
func TestHTTPBodyErrorIsDiscarded(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/long" {
			w.Write([]byte(strings.Repeat("x", 64<<10)))
			return
		}
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(s.Close)
	port := portOf(t, s.Listener.Addr().String())
	err := Check(context.Background(), httpProbe("HTTP", port, "/stall"), nil)
	var errored *ErroredError
	if !errors.As(err, &errored) {
		t.Fatalf("stalled body: err = %v (%T), want an *ErroredError", err, err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error of more than one line: %q", err)
	}
	if err := Check(context.Background(), httpProbe("HTTP", port, "/long"), nil); err != nil {
		t.Fatalf("a 64 KiB body: %v, want success", err)
	}
}
