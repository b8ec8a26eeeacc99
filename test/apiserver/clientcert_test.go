package apiserver_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/restart-supervisor/restart-supervisor/webhook"
)

// TestAPIServerClientCertificate runs the admission configuration that
// docs/webhook.md documents: the API server presents a client certificate
// to the webhook, which requires one (--client-ca-file), and pods are
// injected through it.
func TestAPIServerClientCertificate(t *testing.T) {
	assets := kubeAssets(t)
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	// The client CA and the API server's client certificate.
	clientCA, err := webhook.NewCA("restart-injector-client-ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM := issueClientCert(t, clientCA, "kube-apiserver")
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile := write("client-ca.crt", clientCA.CertPEM)
	kubeconfig := write("webhook-kubeconfig.yaml", []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
users:
- name: %q
  user:
    client-certificate: %s
    client-key: %s
`, ln.Addr().String(), write("client.crt", certPEM), write("client.key", keyPEM))))
	admission := write("admission.yaml", []byte(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: `+kubeconfig+"\n"))

	_, client := startAPIServerWith(t, assets, false, map[string]string{"admission-control-config-file": admission})
	ctx := context.Background()
	for _, ns := range []string{webhookNamespace, "apps"} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	servingCA, err := webhook.NewCA("serving-ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	serving, err := webhook.NewServingCert(servingCA, nil, []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	if err := webhook.WriteKeyPair(certDir, serving, servingCA.CertPEM); err != nil {
		t.Fatal(err)
	}
	pool, err := webhook.Config{ClientCAFile: caFile}.ClientCAs()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	wh := startWebhookWith(t, certDir, ln, log, nil, pool)
	mwc := projectWebhookConfig(t, wh.URL, servingCA.CertPEM)
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a pod injected through the client-certificate webhook", 30*time.Second, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("apps").Create(ctx, nativeRulesPod("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && injected(p), nil
	})
	p, err := client.CoreV1().Pods("apps").Create(ctx, nativeRulesPod("trainer"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	assertInjected(t, p, "trainer")

	// Without a client certificate the same endpoint refuses the handshake.
	c := &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}
	c.RootCAs.AppendCertsFromPEM(servingCA.CertPEM)
	if conn, err := tls.Dial("tcp", ln.Addr().String(), c); err == nil {
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
		if err == nil {
			t.Error("a client without certificate was served")
		}
	}
}

// issueClientCert returns a clientAuth certificate and key signed by ca.
func issueClientCert(t *testing.T, ca webhook.KeyPair, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	caPair, err := tls.X509KeyPair(ca.CertPEM, ca.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caPair.Certificate[0])
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
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caPair.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}
