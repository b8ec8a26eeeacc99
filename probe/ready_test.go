package probe

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

func writeStatus(t *testing.T, dir, state string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "status"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "status", "app.json"), []byte(`{"container":"app","state":"`+state+`","pid":7}`), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReady: not ready whenever the status document says no workload
// runs, or cannot be read; ready while it runs and the container's own
// check (here a TCP listener on 127.0.0.1) answers.
func TestReady(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tcp := &rules.Probe{TCPSocket: &rules.TCPSocketAction{Port: portOf(t, l.Addr().String())}}
	ctx := context.Background()

	if err := Ready(ctx, dir, "app", nil, nil); err == nil {
		t.Error("ready without a status document")
	}
	for _, state := range []string{"backoff", "held", "stopping", "exited"} {
		writeStatus(t, dir, state)
		if err := Ready(ctx, dir, "app", tcp, nil); err == nil || !strings.Contains(err.Error(), "not running ("+state+")") {
			t.Errorf("%s: err = %v", state, err)
		}
	}
	writeStatus(t, dir, "running")
	if err := Ready(ctx, dir, "app", nil, nil); err != nil {
		t.Errorf("running, no readiness check of its own: %v", err)
	}
	if err := Ready(ctx, dir, "app", tcp, nil); err != nil {
		t.Errorf("running, listener up: %v", err)
	}
	l.Close()
	if err := Ready(ctx, dir, "app", tcp, nil); err == nil {
		t.Error("ready although the container's own check fails")
	}
	if err := Ready(ctx, dir, "../app", nil, nil); err == nil {
		t.Error("a container name with a slash was accepted")
	}

	// A symbolic link in place of the document is refused, not followed.
	other := filepath.Join(t.TempDir(), "doc.json")
	os.WriteFile(other, []byte(`{"state":"running"}`), 0o644)
	os.Remove(filepath.Join(dir, "status", "app.json"))
	if err := os.Symlink(other, filepath.Join(dir, "status", "app.json")); err != nil {
		t.Fatal(err)
	}
	if err := Ready(ctx, dir, "app", nil, nil); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("symlink: err = %v", err)
	}
}

// TestStarted: started only while the workload runs and the status
// document says its startup probe succeeded.
func TestStarted(t *testing.T) {
	dir := t.TempDir()
	if err := Started(dir, "app"); err == nil {
		t.Error("started without a status document")
	}
	for _, doc := range []string{`{"state":"running"}`, `{"state":"backoff","started":true}`, `{"state":"running","started":"yes"}`} {
		os.MkdirAll(filepath.Join(dir, "status"), 0o755)
		os.WriteFile(filepath.Join(dir, "status", "app.json"), []byte(doc), 0o644)
		if err := Started(dir, "app"); err == nil {
			t.Errorf("%s: started", doc)
		}
	}
	os.WriteFile(filepath.Join(dir, "status", "app.json"), []byte(`{"state":"running","started":true}`), 0o644)
	if err := Started(dir, "app"); err != nil {
		t.Error(err)
	}
}
