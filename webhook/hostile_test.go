package webhook

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/restart-supervisor/restart-supervisor/imagelookup/registry"
	"github.com/restart-supervisor/restart-supervisor/injector"
)

// A pod without command on a registry nothing listens on: the lookup reads
// the pull secrets first, then fails at once (on loopback).
const lookupPod = `
apiVersion: v1
kind: Pod
metadata:
  name: p
  namespace: %s
spec:
  restartPolicy: Never
  imagePullSecrets: [{name: pull}]
  containers:
  - name: app
    image: 127.0.0.1:1/app:1
    restartPolicy: Never
`

func pullSecret(ns, name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"127.0.0.1:1":{"username":"u","password":"p"}}}`)}}
}

// secretGets lists the secrets read, as namespace/name.
func secretGets(client *fake.Clientset) []string {
	var out []string
	for _, a := range client.Actions() {
		if g, ok := a.(k8stesting.GetAction); ok && a.GetResource().Resource == "secrets" {
			out = append(out, g.GetNamespace()+"/"+g.GetName())
		}
	}
	return out
}

// Pull secrets are read in request.namespace only, by the names the pod
// lists, whatever the review's pod says its namespace is.
func TestPullSecretsScopedToReviewNamespace(t *testing.T) {
	client := fake.NewClientset(pullSecret("apps", "pull"), pullSecret("kube-system", "pull"))
	log := testLogger(t)
	h := &Handler{Mutator: injector.New(injector.Options{SupervisorImage: "example.test/restart-supervisor:test",
		Resolver: registry.New(registry.Options{PullSecrets: PullSecretReader(client, log), Timeout: 5 * time.Second})}),
		Entrypoint: EntrypointDeny, Native: NativeOff, Log: log}
	ts := startServer(t, h)

	// A forged review: request.namespace apps, the pod claims kube-system.
	forged := editReview(t, podReview(t, strings.Replace(lookupPod, "%s", "kube-system", 1)),
		func(r *admissionv1.AdmissionRequest) { r.Namespace = "apps" })
	resp := admit(t, ts, forged)
	if resp.Allowed || resp.Result.Code != 400 || !strings.Contains(resp.Result.Message, `metadata.namespace "kube-system" differs from request.namespace "apps"`) {
		t.Errorf("namespace mismatch: %+v", resp.Result)
	}
	if got := secretGets(client); len(got) != 0 {
		t.Errorf("secrets read for a mismatched review: %v", got)
	}
	// No namespace in the pod: the request's is used.
	resp = admit(t, ts, podReview(t, strings.Replace(lookupPod, "namespace: %s", "", 1)))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "registry 127.0.0.1:1") {
		t.Errorf("lookup: %+v", resp.Result)
	}
	if got := secretGets(client); len(got) != 1 || got[0] != "apps/pull" {
		t.Errorf("secrets read: %v, want apps/pull", got)
	}
}

// The reader refuses what the review does not allow, whoever asks.
func TestPullSecretReaderRefusesOutsideReview(t *testing.T) {
	client := fake.NewClientset(pullSecret("apps", "pull"), pullSecret("apps", "other"),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "db"}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte("x")}})
	read := PullSecretReader(client, testLogger(t))
	pod := &corev1.Pod{Spec: corev1.PodSpec{ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}, {Name: "db"}}}}
	ctx := withPullSecretScope(context.Background(), "apps", pod)
	for _, tc := range []struct {
		ctx       context.Context
		namespace string
		names     []string
		want      string
	}{
		{context.Background(), "apps", []string{"pull"}, "pull secrets are read only for a review that names its namespace"},
		{ctx, "kube-system", []string{"pull"}, `pull secrets are read only in the review's namespace "apps", not "kube-system"`},
		{ctx, "apps", []string{"pull", "other"}, `secret "other" is not one of the pod's imagePullSecrets`},
	} {
		if _, err := read(tc.ctx, tc.namespace, tc.names); err == nil || err.Error() != tc.want {
			t.Errorf("%s %v: got %v, want %s", tc.namespace, tc.names, err, tc.want)
		}
	}
	if got := secretGets(client); len(got) != 0 {
		t.Errorf("secrets read: %v", got)
	}
	// Allowed names are read; a secret that is not a pull secret is dropped.
	got, err := read(ctx, "apps", []string{"pull", "db"})
	if err != nil || len(got) != 1 || got[0].Name != "pull" {
		t.Errorf("got %v %v", got, err)
	}
}

// clientCert issues a client certificate signed by ca.
func clientCert(t *testing.T, ca KeyPair, cn string) tls.Certificate {
	t.Helper()
	caCert, caKey, err := ca.parse()
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// With a client CA, /mutate answers only callers with a certificate it
// signed; the health endpoint stays open for probes.
func TestClientCertificateRequired(t *testing.T) {
	apiCA, err := NewCA("kube-apiserver-webhook-client-ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := NewCA("other", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "client-ca.crt")
	if err := os.WriteFile(caFile, apiCA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	pool, err := Config{ClientCAFile: caFile}.ClientCAs()
	if err != nil {
		t.Fatal(err)
	}
	h := newHandler()
	h.Metrics, h.Log = NewMetrics(), testLogger(t)
	ts := startServerOpts(t, h, h.Metrics, h.Log, func(s *Server) { s.ClientCAs = pool })

	post := func(cert *tls.Certificate) error {
		tc := clientTLS(t, ts.CA.CertPEM)
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
		resp, err := c.Post(ts.URL, "application/json", strings.NewReader(string(podReview(t, nativePod))))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	}
	if err := post(nil); err == nil {
		t.Error("a caller without client certificate was answered")
	}
	other := clientCert(t, otherCA, "kube-apiserver")
	if err := post(&other); err == nil {
		t.Error("a caller with a certificate of another CA was answered")
	}
	good := clientCert(t, apiCA, "kube-apiserver")
	if err := post(&good); err != nil {
		t.Errorf("the API server's certificate: %v", err)
	}
	if code := getCode(t, ts.HealthURL+"/healthz"); code != http.StatusOK {
		t.Errorf("healthz: HTTP %d", code)
	}

	if _, err := (Config{ClientCAFile: filepath.Join(t.TempDir(), "none")}).ClientCAs(); err == nil {
		t.Error("missing client CA file accepted")
	}
	empty := filepath.Join(t.TempDir(), "empty.crt")
	_ = os.WriteFile(empty, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("x")}), 0o600)
	if _, err := (Config{ClientCAFile: empty}).ClientCAs(); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("file without certificate: %v", err)
	}
}

func getCode(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
