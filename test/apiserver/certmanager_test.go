package apiserver_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// certManagerBinaries returns the directory hack/cert-manager.sh fills with
// cert-manager's controller, cainjector and CRDs, built from the Go module
// proxy. Outside CI a machine that cannot build them skips; in CI that is a
// failure.
func certManagerBinaries(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "hack", "cert-manager.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	dir := lines[len(lines)-1]
	if err == nil {
		for _, f := range []string{"controller", "cainjector", "crds/cert-manager.io_certificates.yaml"} {
			if _, serr := os.Stat(filepath.Join(dir, f)); serr != nil {
				err = serr
			}
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cert-manager is required in CI: hack/cert-manager.sh: %v", err)
		}
		t.Skipf("no cert-manager controller/cainjector (hack/cert-manager.sh: %v)", err)
	}
	return dir
}

var certificateGVR = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}

const (
	cmNamespace  = "restart-supervisor"
	servingName  = "restart-injector.restart-supervisor.svc"
	servingCert  = "restart-injector"
	servingTLS   = "restart-injector-tls"
	caCertSecret = "restart-injector-ca"
)

// TestCertManagerInstall runs the real cert-manager (controller and
// cainjector, as processes) against a real kube-apiserver, installs deploy/
// (the cert-manager variant) with kubectl apply -k, and runs the built
// webhook as the installed ServiceAccount on the certificate cert-manager
// issued, projected into a directory the way the kubelet projects the
// Secret. Then: the Certificate is Ready, cainjector filled the caBundle of
// both webhook entries with the issuing CA, a ruled pod created through the
// API server is injected, and a renewal (the Issuing condition `cmctl
// renew` sets) reaches the running webhook: it presents the new certificate
// on the next handshake and the API server keeps calling it.
func TestCertManagerInstall(t *testing.T) {
	cm := certManagerBinaries(t)
	assets := kubeAssets(t)
	start := time.Now()
	env, client := startAPIServer(t, assets, true)
	ctx := context.Background()
	kubectl := filepath.Join(assets, "kubectl")
	dir := t.TempDir()
	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}})
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	certs := dyn.Resource(certificateGVR).Namespace(cmNamespace)

	// cert-manager's CRDs from the release module, then its two processes.
	out, err := exec.Command(kubectl, "--kubeconfig", admin, "apply", "--server-side", "-f", filepath.Join(cm, "crds")).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply cert-manager CRDs: %v\n%s", err, out)
	}
	out, err = exec.Command(kubectl, "--kubeconfig", admin, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io", "crd/certificaterequests.cert-manager.io").CombinedOutput()
	if err != nil {
		t.Fatalf("cert-manager CRDs not established: %v\n%s", err, out)
	}
	controllerLogs := runProcess(t, "cert-manager controller", filepath.Join(cm, "controller"), "--kubeconfig="+admin)
	cainjectorLogs := runProcess(t, "cert-manager cainjector", filepath.Join(cm, "cainjector"), "--kubeconfig="+admin)

	// deploy/ as shipped, with two changes for a test without a cluster
	// network: the API server calls the webhook on loopback (a URL instead of
	// the Service), so the serving certificate also names 127.0.0.1.
	port, healthPort := freePort(t), freePort(t)
	url := fmt.Sprintf("https://127.0.0.1:%d/mutate", port)
	overlay := t.TempDir()
	rel, _ := filepath.Rel(overlay, filepath.Join(repoRoot(t), "deploy"))
	kustomization := fmt.Sprintf(`resources: [%s]
patches:
- target: {group: cert-manager.io, kind: Certificate, name: %s}
  patch: |-
    - {op: add, path: /spec/ipAddresses, value: ["127.0.0.1"]}
- target: {kind: MutatingWebhookConfiguration, name: restart-injector}
  patch: |-
    - {op: remove, path: /webhooks/0/clientConfig/service}
    - {op: add, path: /webhooks/0/clientConfig/url, value: %q}
    - {op: remove, path: /webhooks/1/clientConfig/service}
    - {op: add, path: /webhooks/1/clientConfig/url, value: %q}
`, rel, servingCert, url, url)
	must(t, os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644))
	out, err = exec.Command(kubectl, "--kubeconfig", admin, "apply", "-k", overlay).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply -k deploy/ (cert-manager): %v\n%s", err, out)
	}
	t.Logf("kubectl apply -k deploy/:\n%s", out)
	installed := time.Now()

	// cert-manager issues: CA Certificate, then the serving Certificate.
	for _, name := range []string{caCertSecret, servingCert} {
		waitFor(t, "Certificate "+name+" Ready", 3*time.Minute, func(ctx context.Context) (bool, error) {
			c, err := certs.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			status, reason, msg := certCondition(c, "Ready")
			return status == "True", fmt.Errorf("Ready=%s %s: %s", status, reason, msg)
		})
	}
	t.Logf("Certificates Ready %.1fs after kubectl apply", time.Since(installed).Seconds())
	secret, err := client.CoreV1().Secrets(cmNamespace).Get(ctx, servingTLS, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the issued Secret: %v", err)
	}
	caSecret, err := client.CoreV1().Secrets(cmNamespace).Get(ctx, caCertSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the CA Secret: %v", err)
	}
	issued := parseCert(t, secret.Data["tls.crt"])
	ca := caSecret.Data["tls.crt"]
	if !bytes.Equal(secret.Data["ca.crt"], ca) {
		t.Errorf("the serving Secret's ca.crt is not the CA Certificate's")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		t.Fatal("the CA Secret holds no certificate")
	}
	if _, err := issued.Verify(x509.VerifyOptions{Roots: roots, DNSName: servingName}); err != nil {
		t.Errorf("the issued certificate does not verify for %s against the CA: %v", servingName, err)
	}

	// cainjector fills every webhook entry's caBundle with that CA.
	waitFor(t, "cainjector to fill the caBundle of both webhook entries", 2*time.Minute, func(ctx context.Context) (bool, error) {
		mwc, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "restart-injector", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if len(mwc.Webhooks) != 2 {
			return false, fmt.Errorf("%d webhook entries", len(mwc.Webhooks))
		}
		for _, w := range mwc.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, ca) {
				return false, fmt.Errorf("%s: caBundle of %d bytes, not the CA", w.Name, len(w.ClientConfig.CABundle))
			}
		}
		return true, nil
	})
	t.Logf("caBundle injected %.1fs after kubectl apply", time.Since(installed).Seconds())

	// The kubelet's projection of the Secret, kept up to date while the
	// webhook runs.
	tlsDir := filepath.Join(dir, "tls")
	must(t, os.Mkdir(tlsDir, 0o755))
	vol := &projectedSecret{t: t, dir: tlsDir}
	vol.publish(secret.Data)
	projCtx, stopProjection := context.WithCancel(ctx)
	projected := make(chan struct{})
	go func() {
		defer close(projected)
		vol.follow(projCtx, func(ctx context.Context) (*corev1.Secret, error) {
			return client.CoreV1().Secrets(cmNamespace).Get(ctx, servingTLS, metav1.GetOptions{})
		})
	}()
	t.Cleanup(func() { stopProjection(); <-projected })

	bin := filepath.Join(dir, "restart-injector")
	build := exec.Command("go", "build", "-o", bin, "./cmd/restart-injector")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := kubeconfigFor(t, env, dir, "sa", envtest.User{Name: "system:serviceaccount:restart-supervisor:restart-injector",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:restart-supervisor", "system:authenticated"}})
	// The installed Deployment's arguments (--cert-dir is the Secret's mount).
	var logs testutil.SyncBuffer
	cmd := exec.Command(bin, "serve", "--cert-dir="+tlsDir, "--kubeconfig="+sa, "--namespace="+cmNamespace,
		fmt.Sprintf("--listen=127.0.0.1:%d", port), fmt.Sprintf("--health-listen=127.0.0.1:%d", healthPort),
		"--native=auto", "--on-entrypoint-error=deny", "--supervisor-image="+supervisorImage, "--log-format=text")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		t.Logf("restart-injector logs:\n%s", logs.String())
		t.Logf("cert-manager controller logs (tail):\n%s", tail(controllerLogs.String(), 40))
		t.Logf("cert-manager cainjector logs (tail):\n%s", tail(cainjectorLogs.String(), 20))
	})
	alive := func() {
		t.Helper()
		select {
		case err := <-exited:
			t.Fatalf("restart-injector exited: %v", err)
		default:
		}
	}
	waitFor(t, "/readyz", 60*time.Second, func(context.Context) (bool, error) {
		alive()
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort))
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == 200, fmt.Errorf("HTTP %d", resp.StatusCode)
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if got, err := servedCert(addr, roots); err != nil || !got.Equal(issued) {
		t.Fatalf("the webhook does not present the certificate cert-manager issued (err %v)", err)
	}

	createRuled := func(what string) {
		t.Helper()
		var p *corev1.Pod
		waitFor(t, "a ruled pod injected through the API server ("+what+")", 60*time.Second, func(ctx context.Context) (bool, error) {
			alive()
			pod := nativeRulesPod(what)
			pod.Name, pod.GenerateName = "", what+"-"
			got, err := client.CoreV1().Pods("apps").Create(ctx, pod, metav1.CreateOptions{})
			p = got
			return err == nil && injected(got), err
		})
		assertInjected(t, p, "trainer")
	}
	createRuled("issued")

	// Renewal, as `cmctl renew` asks for it: the Issuing condition.
	before, err := certs.Get(ctx, servingCert, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	revision, _, _ := unstructured.NestedInt64(before.Object, "status", "revision")
	renewAsked := time.Now()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := certs.Get(ctx, servingCert, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(c.Object, "status", "conditions")
		conds = append(conds, map[string]any{
			"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
			"message":            "Certificate re-issuance manually triggered",
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
			"observedGeneration": c.GetGeneration(),
		})
		if err := unstructured.SetNestedSlice(c.Object, conds, "status", "conditions"); err != nil {
			return err
		}
		_, err = certs.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("set the Issuing condition: %v", err)
	}
	var renewed *x509.Certificate
	waitFor(t, "cert-manager to renew the serving certificate", 2*time.Minute, func(ctx context.Context) (bool, error) {
		c, err := certs.Get(ctx, servingCert, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		rev, _, _ := unstructured.NestedInt64(c.Object, "status", "revision")
		status, _, _ := certCondition(c, "Ready")
		if rev <= revision || status != "True" {
			return false, fmt.Errorf("revision %d, Ready=%s", rev, status)
		}
		s, err := client.CoreV1().Secrets(cmNamespace).Get(ctx, servingTLS, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		renewed = parseCert(t, s.Data["tls.crt"])
		return !renewed.Equal(issued), fmt.Errorf("the Secret still holds the first certificate")
	})
	t.Logf("renewed %.1fs after the Issuing condition was set", time.Since(renewAsked).Seconds())
	if bytes.Equal(renewed.RawSubjectPublicKeyInfo, issued.RawSubjectPublicKeyInfo) {
		t.Error("renewed with the same key, though the Certificate's rotationPolicy is Always")
	}

	// The running webhook presents the renewed certificate on a new handshake.
	waitFor(t, "the running webhook to present the renewed certificate", 90*time.Second, func(context.Context) (bool, error) {
		alive()
		got, err := servedCert(addr, roots)
		if err != nil {
			return false, err
		}
		return got.Equal(renewed), fmt.Errorf("still serving serial %s", got.SerialNumber)
	})
	t.Logf("renewed certificate served %.1fs after the Issuing condition was set", time.Since(renewAsked).Seconds())
	mwc, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "restart-injector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range mwc.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, ca) {
			t.Errorf("%s: the caBundle changed with the renewal", w.Name)
		}
	}
	createRuled("renewed")
	alive()
	if n := strings.Count(logs.String(), "serving certificate loaded"); n != 2 {
		t.Errorf("the webhook logged %d certificate loads, want 2 (issued, renewed)", n)
	}
	t.Logf("whole test %.1fs (API server start included)", time.Since(start).Seconds())
}

// projectedSecret lays out dir as the kubelet's atomic writer fills a Secret
// volume: the files in a timestamped directory, `..data` linking to it, the
// visible names linking through `..data`; an update renames a fresh
// `..data_tmp` link over `..data`.
type projectedSecret struct {
	t    *testing.T
	dir  string
	gen  int
	last map[string][]byte
}

func (v *projectedSecret) publish(data map[string][]byte) {
	v.gen++
	ts := filepath.Join(v.dir, fmt.Sprintf("..2026_12_01_00_00_%02d.%d", v.gen, os.Getpid()))
	if err := os.Mkdir(ts, 0o755); err != nil {
		v.t.Error(err)
		return
	}
	for name, b := range data {
		if err := os.WriteFile(filepath.Join(ts, name), b, 0o644); err != nil {
			v.t.Error(err)
			return
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		v.t.Error(err)
		return
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Error(err)
		return
	}
	for name := range data {
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				v.t.Error(err)
			}
		}
	}
	v.last = data
}

// follow re-projects the Secret whenever its data changes, as the kubelet's
// periodic sync does, until ctx ends.
func (v *projectedSecret) follow(ctx context.Context, get func(context.Context) (*corev1.Secret, error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		s, err := get(ctx)
		if err != nil {
			continue
		}
		changed := len(s.Data) != len(v.last)
		for k, b := range s.Data {
			changed = changed || !bytes.Equal(b, v.last[k])
		}
		if changed {
			v.publish(s.Data)
		}
	}
}

// runProcess starts a long-running helper process and kills it when the test
// ends; a process that exits early fails the test at its end.
func runProcess(t *testing.T, name, bin string, args ...string) *testutil.SyncBuffer {
	t.Helper()
	var logs testutil.SyncBuffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case err := <-done:
			t.Errorf("%s exited during the test: %v\n%s", name, err, tail(logs.String(), 40))
			return
		default:
		}
		_ = cmd.Process.Kill()
		<-done
	})
	return &logs
}

func certCondition(c *unstructured.Unstructured, typ string) (status, reason, message string) {
	conds, _, _ := unstructured.NestedSlice(c.Object, "status", "conditions")
	for _, x := range conds {
		m, _ := x.(map[string]any)
		if m["type"] == typ {
			s, _ := m["status"].(string)
			r, _ := m["reason"].(string)
			msg, _ := m["message"].(string)
			return s, r, msg
		}
	}
	return "", "", ""
}

// parseCert is the first certificate of a PEM bundle (tls.crt: the leaf).
func parseCert(t *testing.T, pemData []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(pemData)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("no certificate in %q", pemData)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// servedCert is the leaf certificate the server at addr presents on a new
// TLS handshake, verified against roots for the Service's name.
func servedCert(addr string, roots *x509.CertPool) (*x509.Certificate, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: roots, ServerName: servingName, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
