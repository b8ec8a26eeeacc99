package webhook

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// freeAddr returns a loopback address nothing listens on; Run takes
// addresses, not listeners.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// A files-mode webhook with native mode off and no registry lookups needs
// no API server: Run serves reviews, health and metrics, and returns nil
// after draining once its context is done.
func TestRunWithoutCluster(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	dir := t.TempDir()
	ca := issue(t, dir, "localhost")
	mutate, health := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Listen: mutate, HealthListen: health, CertDir: dir, Native: NativeOff, Log: testLogger(t)})
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after cancel")
		}
	}()

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + health + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(20 * time.Second)
	for code, body := get("/readyz"); code != http.StatusOK; code, body = get("/readyz") {
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(t, ca.CertPEM)}, Timeout: 30 * time.Second}
	body := podReview(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: apps}\nspec:\n  containers:\n  - {name: app, image: app:1}\n")
	resp, err := client.Post("https://"+mutate+"/mutate", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"allowed":true`) {
		t.Errorf("review: %d %s", resp.StatusCode, out)
	}
	_, metrics := get("/metrics")
	for _, want := range []string{
		`restart_injector_admission_reviews_total{result="untouched"} 1`,
		"restart_injector_native_restart_rules 0",
		"restart_injector_serving_certificate_expiry_timestamp_seconds ",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestRunRejectsConfig(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	if PodNamespace() != "" {
		t.Skip("running in a pod: the namespace is known")
	}
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Native: "maybe"}, `native mode "maybe"`},
		{Config{Native: NativeOff, CertMode: "vault"}, `certificate mode "vault"`},
		{Config{Native: NativeOff, OnEntrypointError: "ignore"}, `entrypoint policy "ignore"`},
		{Config{Native: NativeOff, CertMode: CertSelf}, "namespace is needed"},
		{Config{}, "namespace is needed"}, // the zero Native is NativeAuto
		{Config{Native: NativeOff, InsecureRegistries: []string{"http://r.test"}}, `registry "http://r.test": want HOST or HOST:PORT`},
		{Config{Native: NativeOff, AllowedRegistries: []string{"r.test", ""}}, `registry "": want HOST or HOST:PORT`},
		{Config{Native: NativeOff, ClientCAFile: "/nonexistent/ca.crt"}, "client CA file: open /nonexistent/ca.crt"},
	} {
		tc.c.Log = testLogger(t)
		if err := Run(context.Background(), tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v): %v, want %q", tc.c, err, tc.want)
		}
	}
}
