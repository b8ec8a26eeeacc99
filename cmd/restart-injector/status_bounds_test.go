package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// statusKubeconfig writes a kubeconfig whose cluster is the plain HTTP
// server at addr (loopback).
func statusKubeconfig(t *testing.T, addr string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://%s"}}]
users: [{name: u, user: {}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: default}}]
current-context: x
`, addr)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStatusBoundsTheAPIServer: status talks to whatever the kubeconfig
// names. A server that accepts and never answers made it wait for ever
// (still waiting at 60 s), and one that streams a 200 MB list took it to
// 1.67 GB. --request-timeout (30 s by default, 1 s here) ends the first
// with exit 1 and one line; every response is cut at 64 MiB.
func TestStatusBoundsTheAPIServer(t *testing.T) {
	for _, c := range []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"silent", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, "exceeded"},
		{"endless list", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[`)
			item := []byte(`{"metadata":{"name":"` + strings.Repeat("x", 1000) + `"}},`)
			for sent := 0; sent < 200<<20 && r.Context().Err() == nil; sent += len(item) {
				if _, err := w.Write(item); err != nil {
					return
				}
			}
		}, "exceeds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: c.handler}
			go srv.Serve(ln)
			defer srv.Close()
			var stdout, stderr bytes.Buffer
			done := make(chan int, 1)
			go func() {
				done <- runStatus(context.Background(), []string{"--kubeconfig", statusKubeconfig(t, ln.Addr().String()), "--request-timeout", "1s"}, &stdout, &stderr)
			}()
			select {
			case code := <-done:
				msg := strings.TrimSpace(stderr.String())
				if code != exitFailure || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") > 0 {
					t.Fatalf("exit %d, stderr %q; want exit %d and one line saying %q", code, msg, exitFailure, c.want)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("status still waiting after 60 s")
			}
		})
	}
}
