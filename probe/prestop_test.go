package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

func writeStatusOf(t *testing.T, dir, container, doc string) string {
	t.Helper()
	path := filepath.Join(dir, contract.StatusDir, container+contract.StatusExt)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPrestopRefusesWhatIsNotTheSupervisors: the hook signals nothing on
// the word of a document it cannot trust, nor a process that is not a
// supervisor, and answers at once for a supervisor that has exited.
func TestPrestopRefusesWhatIsNotTheSupervisors(t *testing.T) {
	dir := t.TempDir()
	// This test process is no supervisor: its signal would kill it.
	writeStatusOf(t, dir, "app", fmt.Sprintf(`{"state":"running","supervisorPid":%d}`, os.Getpid()))
	if err := Prestop(dir, "app", time.Second); err == nil || !strings.Contains(err.Error(), "is not the supervisor") {
		t.Fatalf("Prestop with a PID that is no supervisor: %v", err)
	}
	writeStatusOf(t, dir, "app", `{"state":"running","supervisorPid":0}`)
	if err := Prestop(dir, "app", time.Second); err == nil || !strings.Contains(err.Error(), "not a process") {
		t.Fatalf("Prestop with PID 0: %v", err)
	}
	writeStatusOf(t, dir, "app", `{"state":"exited","supervisorPid":1}`)
	if err := Prestop(dir, "app", time.Second); !errors.Is(err, ErrNoWorkload) {
		t.Fatalf("Prestop of an exited supervisor: %v, want ErrNoWorkload", err)
	}
	if err := os.Remove(filepath.Join(dir, contract.StatusDir, "app"+contract.StatusExt)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, contract.StatusDir, "app"+contract.StatusExt)); err != nil {
		t.Fatal(err)
	}
	if err := Prestop(dir, "app", time.Second); err == nil {
		t.Fatal("Prestop followed a symbolic link")
	}
	if err := Prestop(dir, "../app", time.Second); err == nil {
		t.Fatal("Prestop took a container name with a slash")
	}
	if os.Geteuid() == 0 {
		path := writeStatusOf(t, dir, "other", `{"state":"exited","supervisorPid":1}`)
		if err := os.Chown(path, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if err := Prestop(dir, "other", time.Second); err == nil || !strings.Contains(err.Error(), "owned by UID 65534") {
			t.Fatalf("Prestop with another UID's document: %v", err)
		}
	}
}

// TestLifecycleGet: as the kubelet's handler, any answer is a success
// (500 included), a request that cannot be made an error, and an HTTPS
// hook answered in plain HTTP is sent again over HTTP without its
// Authorization header.
func TestLifecycleGet(t *testing.T) {
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = append(auth, r.Header.Get("Authorization"))
		if r.URL.Path != "/drain" || r.Header.Get("X-Drain") != "1" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	a := &rules.HTTPGetAction{Host: host, Port: int32(p), Path: "/drain", HTTPHeaders: []rules.HTTPHeader{{Name: "X-Drain", Value: "1"}, {Name: "Authorization", Value: "Bearer x"}}}
	if err := LifecycleGet(context.Background(), a); err != nil {
		t.Fatalf("a 500 answer: %v, want nil", err)
	}
	a.Scheme = "HTTPS"
	if err := LifecycleGet(context.Background(), a); err != nil {
		t.Fatalf("HTTPS to an HTTP server: %v, want the HTTP retry to succeed", err)
	}
	if len(auth) != 2 || auth[0] != "Bearer x" || auth[1] != "" {
		t.Fatalf("Authorization headers seen %q: want the retry without it", auth)
	}
	srv.Close()
	a.Scheme = ""
	if err := LifecycleGet(context.Background(), a); err == nil {
		t.Fatal("a refused connection: want an error")
	}
}
