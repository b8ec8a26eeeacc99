package docker

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInjectorImage builds the `prebuilt` target of Dockerfile.injector
// from a static binary and runs the webhook from it: a scratch image,
// non-root, that serves an AdmissionReview over HTTPS with a certificate
// mounted as a Secret volume would be, and drains on docker stop.
func TestInjectorImage(t *testing.T) {
	need(t)
	ctxDir := t.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(ctxDir, "restart-injector"), "./cmd/restart-injector")
	build.Dir = env.root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if err := copyFile("/etc/ssl/certs/ca-certificates.crt", filepath.Join(ctxDir, "ca-certificates.crt")); err != nil {
		t.Fatal(err)
	}
	image := "restart-supervisor-e2e/injector:test"
	if out, err := dockerBuild(filepath.Join(env.root, "Dockerfile.injector"), ctxDir, "--target", "prebuilt", "-t", image); err != nil {
		t.Fatalf("docker build --target prebuilt: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "image", "rm", "-f", image).Run() })

	var img []struct {
		Config struct {
			User       string
			Entrypoint []string
			Cmd        []string
		}
	}
	if err := json.Unmarshal([]byte(run(t, "image", "inspect", image)), &img); err != nil || len(img) != 1 {
		t.Fatalf("image inspect: %v", err)
	}
	if c := img[0].Config; c.User != "65532:65532" || strings.Join(c.Entrypoint, " ") != "/restart-injector" || strings.Join(c.Cmd, " ") != "serve" {
		t.Errorf("image config: User %q Entrypoint %q Cmd %q", c.User, c.Entrypoint, c.Cmd)
	}

	certDir := t.TempDir()
	pool := writeServingCert(t, certDir)
	os.Chmod(certDir, 0o755)
	port, healthPort := freePort(t), freePort(t)
	c := startContainer(t, "--network", "host", "-v", certDir+":/etc/restart-injector/tls:ro", image,
		"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--health-listen", fmt.Sprintf("127.0.0.1:%d", healthPort),
		"--native", "off", "--registry-lookup=false", "--shutdown-delay", "0s")

	ready := fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(ready)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered 200; logs:\n%s", ready, logs(t, c))
		}
		time.Sleep(200 * time.Millisecond)
	}

	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1",
"kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},
"namespace":"default","operation":"CREATE","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},
"spec":{"restartPolicy":"Never","containers":[{"name":"app","image":"busybox","command":["sh","-c","exit 42"],
"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}]}}}}`
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	resp, err := client.Post(fmt.Sprintf("https://127.0.0.1:%d/mutate", port), "application/json", strings.NewReader(review))
	if err != nil {
		t.Fatalf("review: %v; logs:\n%s", err, logs(t, c))
	}
	var got struct {
		Response struct {
			UID     string
			Allowed bool
			Patch   []byte
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || got.Response.UID != "u1" || !got.Response.Allowed {
		t.Fatalf("review answer %+v, err %v", got.Response, err)
	}
	if !bytes.Contains(got.Response.Patch, []byte(`"/spec/initContainers"`)) || !bytes.Contains(got.Response.Patch, []byte("/opt/restart-supervisor/restart-supervisor")) {
		t.Errorf("patch does not add the install container and wrap the command: %s", got.Response.Patch)
	}

	run(t, "stop", "-t", "30", c)
	if code := inspect(t, c).State.ExitCode; code != 0 {
		t.Errorf("webhook exit code after docker stop = %d, want 0 (drained); logs:\n%s", code, logs(t, c))
	}
}

// writeServingCert writes tls.crt and tls.key for localhost and 127.0.0.1
// into dir, readable by the image's non-root user, and returns a pool that
// trusts the certificate.
func writeServingCert(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{"tls.crt": {Type: "CERTIFICATE", Bytes: der}, "tls.key": {Type: "PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
