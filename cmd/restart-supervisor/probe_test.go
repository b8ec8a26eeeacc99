package main_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestHTTPSLivenessThroughRestartProbe: the supervisor runs an httpGet
// liveness check through restart-probe against an HTTPS server with a
// self-signed certificate. The server fails its first two answers, which
// kills run 1 (the container's OnFailure restarts it although the pod's
// policy is Never); run 2 is answered 200 and lives until it exits 0.
func TestHTTPSLivenessThroughRestartProbe(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) <= 2 || r.URL.Path != "/healthz" || r.Header.Get("X-Probe") != "yes" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	dir := t.TempDir()
	cfg := fmt.Sprintf(`{"restartPolicy":"OnFailure","podRestartPolicy":"Never","backoff":{"initial":"100ms"},
	  "probes":{"liveness":{"httpGet":{"scheme":"HTTPS","port":%s,"path":"/healthz","httpHeaders":[{"name":"X-Probe","value":"yes"}]},
	    "periodSeconds":1,"failureThreshold":2}}}`, port)
	s := start(t, []string{"RESTART_SUPERVISOR_CONFIG=" + cfg}, bin, "--", "sh", "-c",
		fmt.Sprintf(`cd %s; n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
[ $n -ge 2 ] && { sleep 4; exit 0; }; exec sleep 600`, dir))
	if st := s.wait(60 * time.Second); st != 0 {
		t.Fatalf("exit status %d, want 0; log:\n%s", st, s.stderr.String())
	}
	log := s.stderr.String()
	if strings.Count(log, "liveness probe failed 2 times in a row") != 1 || !strings.Contains(log, "restarts=1") {
		t.Fatalf("want one liveness kill and one restart; log:\n%s", log)
	}
	if !strings.Contains(log, "HTTP status 500") {
		t.Fatalf("restart-probe's reason is not in the log:\n%s", log)
	}
	if n := requests.Load(); n < 4 {
		t.Fatalf("%d requests, want the 2 failures and checks of run 2", n)
	}
}

// TestTCPStartupThroughRestartProbe: a tcpSocket startup probe on a port
// nothing listens on stops the workload after failureThreshold checks;
// the container's policy Never hands the exit (143) over.
func TestTCPStartupThroughRestartProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	cfg := fmt.Sprintf(`{"restartPolicy":"Never","podRestartPolicy":"Never",
	  "probes":{"startup":{"tcpSocket":{"port":%s},"periodSeconds":1,"failureThreshold":2,"terminationGracePeriodSeconds":3}}}`, port)
	s := start(t, []string{"RESTART_SUPERVISOR_CONFIG=" + cfg}, bin, "--", "sleep", "600")
	if st := s.wait(60 * time.Second); st != 143 {
		t.Fatalf("exit status %d, want 143; log:\n%s", st, s.stderr.String())
	}
	if log := s.stderr.String(); !strings.Contains(log, "connection refused") || !strings.Contains(log, "startup probe failed 2 times in a row") {
		t.Fatalf("log:\n%s", log)
	}
}

// TestReadinessFollowsTheWorkload: `restart-probe ready`, run as the
// kubelet's exec probe runs it (the container's environment), is not
// ready while the supervisor waits in back-off and ready while the
// workload runs and its own readiness check (a TCP listener) answers.
func TestReadinessFollowsTheWorkload(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o755)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	cfg := fmt.Sprintf(`{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"4s"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}],
	  "probes":{"readiness":{"tcpSocket":{"port":%s}}}}`, port)
	env := []string{"RESTART_SUPERVISOR_STATE_DIR=" + state, "RESTART_SUPERVISOR_CONTAINER_NAME=app", "RESTART_SUPERVISOR_CONFIG=" + cfg}
	// Runs 1 and 2 exit 42 (the second restart waits 4 s); run 3 serves.
	s := start(t, env, bin, "--", "sh", "-c", fmt.Sprintf(`cd %s; n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
[ $n -lt 3 ] && exit 42; exec sleep 600`, dir))
	defer s.signal(syscall.SIGTERM)
	ready := func() (bool, string) {
		cmd := exec.Command(filepath.Join(filepath.Dir(bin), "restart-probe"), "ready")
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return err == nil, string(out)
	}
	s.waitLog("delay=4s", 20*time.Second)
	// The status document follows the log line at once; the back-off
	// lasts 4 s.
	waitFor(t, "not ready in back-off", 3*time.Second, func() bool {
		ok, out := ready()
		return !ok && strings.Contains(out, "not running (backoff)")
	})
	waitFor(t, "ready once run 3 runs", 20*time.Second, func() bool { ok, _ := ready(); return ok })
	l.Close()
	if ok, out := ready(); ok || !strings.Contains(out, "connection refused") {
		t.Fatalf("ready although the workload's own check fails: %v %s", ok, out)
	}
}

// TestStartedFollowsTheStartupProbe: `restart-probe started`, the
// kubelet's startup probe of a container whose startup probe the
// supervisor runs, answers started only once the workload's own startup
// probe has succeeded.
func TestStartedFollowsTheStartupProbe(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o755)
	cfg := fmt.Sprintf(`{"restartPolicy":"Never","podRestartPolicy":"Never",
	  "probes":{"startup":{"exec":{"command":["test","-f","%s/up"]},"periodSeconds":1,"failureThreshold":30}}}`, dir)
	env := []string{"RESTART_SUPERVISOR_STATE_DIR=" + state, "RESTART_SUPERVISOR_CONTAINER_NAME=app", "RESTART_SUPERVISOR_CONFIG=" + cfg}
	s := start(t, env, bin, "--", "sleep", "600")
	defer s.signal(syscall.SIGTERM)
	started := func() bool {
		cmd := exec.Command(filepath.Join(filepath.Dir(bin), "restart-probe"), "started")
		cmd.Env = append(os.Environ(), env...)
		return cmd.Run() == nil
	}
	s.waitLog("startup probe failed", 10*time.Second)
	if started() {
		t.Fatal("started before the workload's startup probe succeeded")
	}
	os.WriteFile(filepath.Join(dir, "up"), nil, 0o644)
	waitFor(t, "started", 15*time.Second, started)
	if !strings.Contains(s.stderr.String(), "startup probe succeeded") {
		t.Fatalf("log:\n%s", s.stderr.String())
	}
}

// TestLivenessErroredCheckDiscarded: a check that errors (200 and its
// headers, then a body that never comes) is thrown away as the kubelet's
// worker does (pkg/kubelet/prober/worker.go doProbe, v1.37.2), not counted
// as a success that resets the failures. With failureThreshold 2 the
// answers 500, stall, 500 are two failures in a row: one liveness kill.
// Counted as a success, the stall would reset the count and run 1 would
// never be killed.
func TestLivenessErroredCheckDiscarded(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch requests.Add(1) {
		case 1, 3:
			w.WriteHeader(http.StatusInternalServerError)
		case 2:
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	dir := t.TempDir()
	cfg := fmt.Sprintf(`{"restartPolicy":"OnFailure","podRestartPolicy":"Never","backoff":{"initial":"100ms"},
	  "probes":{"liveness":{"httpGet":{"port":%s,"path":"/healthz"},"periodSeconds":1,"timeoutSeconds":3,"failureThreshold":2}}}`, port)
	s := start(t, []string{"RESTART_SUPERVISOR_CONFIG=" + cfg}, bin, "--", "sh", "-c",
		fmt.Sprintf(`cd %s; n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
[ $n -ge 2 ] && { sleep 2; exit 0; }; exec sleep 600`, dir))
	if st := s.wait(90 * time.Second); st != 0 {
		t.Fatalf("exit status %d, want 0; log:\n%s", st, s.stderr.String())
	}
	log := s.stderr.String()
	if strings.Count(log, "liveness probe failed 2 times in a row") != 1 || !strings.Contains(log, "restarts=1") {
		t.Fatalf("want one liveness kill and one restart; log:\n%s", log)
	}
	if !strings.Contains(log, "liveness probe errored; result discarded") {
		t.Fatalf("the errored check is not in the log:\n%s", log)
	}
}
