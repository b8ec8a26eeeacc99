package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Lifetimes of self-managed certificates. The serving certificate is renewed
// in place long before it expires; the CA outlives many renewals so the
// caBundle rarely changes.
const (
	CALifetime      = 10 * 365 * 24 * time.Hour
	ServingLifetime = 365 * 24 * time.Hour
	// RenewBefore is how long before expiry a serving certificate is replaced.
	RenewBefore = 30 * 24 * time.Hour
)

// KeyPair is a PEM certificate and its PEM private key.
type KeyPair struct {
	CertPEM, KeyPEM []byte
}

// NewCA creates a self-signed CA.
func NewCA(commonName string, now time.Time) (KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return KeyPair{}, err
	}
	return encode(der, key)
}

// NewServingCert issues a serving certificate for dnsNames (and any IP
// addresses among them) signed by ca.
func NewServingCert(ca KeyPair, dnsNames []string, ips []string, now time.Time) (KeyPair, error) {
	caCert, caKey, err := ca.parse()
	if err != nil {
		return KeyPair{}, fmt.Errorf("CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: first(dnsNames, "restart-injector")},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ServingLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dnsNames,
	}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return KeyPair{}, fmt.Errorf("invalid IP address %q", s)
		}
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return KeyPair{}, err
	}
	return encode(der, key)
}

func encode(der []byte, key *ecdsa.PrivateKey) (KeyPair, error) {
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return KeyPair{}, err
	}
	return KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}, nil
}

func (k KeyPair) parse() (*x509.Certificate, any, error) {
	cb, _ := pem.Decode(k.CertPEM)
	kb, _ := pem.Decode(k.KeyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

// NotAfter returns the certificate's expiry (zero if unparsable).
func (k KeyPair) NotAfter() time.Time {
	cb, _ := pem.Decode(k.CertPEM)
	if cb == nil {
		return time.Time{}
	}
	c, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return time.Time{}
	}
	return c.NotAfter
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func first(s []string, def string) string {
	if len(s) == 0 {
		return def
	}
	return s[0]
}

// ServiceDNSNames are the names the API server may use to reach a Service.
func ServiceDNSNames(service, namespace string) []string {
	return []string{
		service + "." + namespace + ".svc",
		service + "." + namespace + ".svc.cluster.local",
		service + "." + namespace,
		service,
	}
}

// WriteKeyPair writes tls.crt, tls.key and ca.crt into dir, each by an
// atomic rename so a watcher never reads a half-written file.
func WriteKeyPair(dir string, serving KeyPair, caPEM []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// Key before certificate: a reload triggered between the two renames
	// fails on the mismatch and keeps the old pair, rather than pairing a new
	// certificate with an old key.
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{KeyFile, serving.KeyPEM, 0o600}, {CertFile, serving.CertPEM, 0o644}, {CAFile, caPEM, 0o644}} {
		tmp := filepath.Join(dir, "."+f.name+".tmp")
		if err := os.WriteFile(tmp, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, f.name)); err != nil {
			return err
		}
	}
	return nil
}

// SelfManaged is the certificate mode for clusters without cert-manager. One
// CA is shared by all replicas through a Secret in the webhook's namespace
// (the first replica to start creates it), each replica issues its own
// serving certificate from it, and the CA is written into the caBundle of
// every webhook in the named MutatingWebhookConfiguration.
type SelfManaged struct {
	Client        kubernetes.Interface
	Namespace     string
	CASecret      string // Secret holding ca.crt and ca.key
	WebhookConfig string // MutatingWebhookConfiguration to patch
	DNSNames      []string
	IPs           []string
	Dir           string // where tls.crt/tls.key/ca.crt are written for the CertWatcher
	Now           func() time.Time
}

func (s *SelfManaged) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

// EnsureCA returns the shared CA, creating its Secret when absent. Two
// replicas racing to create it both end up with the one that was stored.
func (s *SelfManaged) EnsureCA(ctx context.Context) (KeyPair, error) {
	secrets := s.Client.CoreV1().Secrets(s.Namespace)
	sec, err := secrets.Get(ctx, s.CASecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		ca, gerr := NewCA("restart-injector-ca", s.now())
		if gerr != nil {
			return KeyPair{}, gerr
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: s.CASecret, Namespace: s.Namespace,
				Labels: map[string]string{"app.kubernetes.io/name": "restart-injector"}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{CAFile: ca.CertPEM, "ca.key": ca.KeyPEM},
		}
		created, cerr := secrets.Create(ctx, sec, metav1.CreateOptions{})
		switch {
		case cerr == nil:
			sec, err = created, nil
		case apierrors.IsAlreadyExists(cerr):
			sec, err = secrets.Get(ctx, s.CASecret, metav1.GetOptions{})
		default:
			return KeyPair{}, fmt.Errorf("create Secret %s/%s: %w", s.Namespace, s.CASecret, cerr)
		}
	}
	if err != nil {
		return KeyPair{}, fmt.Errorf("get Secret %s/%s: %w", s.Namespace, s.CASecret, err)
	}
	ca := KeyPair{CertPEM: sec.Data[CAFile], KeyPEM: sec.Data["ca.key"]}
	if _, _, err := ca.parse(); err != nil {
		return KeyPair{}, fmt.Errorf("parse Secret %s/%s: keys ca.crt/ca.key: %w", s.Namespace, s.CASecret, err)
	}
	return ca, nil
}

// Issue writes a fresh serving certificate signed by ca into Dir.
func (s *SelfManaged) Issue(ca KeyPair) (KeyPair, error) {
	serving, err := NewServingCert(ca, s.DNSNames, s.IPs, s.now())
	if err != nil {
		return KeyPair{}, err
	}
	return serving, WriteKeyPair(s.Dir, serving, ca.CertPEM)
}

// PatchCABundle sets caBundle on every webhook of the configuration that
// does not already carry the CA. It uses a JSON patch guarded by the
// object's resourceVersion, so concurrent replicas cannot interleave.
func (s *SelfManaged) PatchCABundle(ctx context.Context, caPEM []byte) error {
	mwcs := s.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	for attempt := 0; ; attempt++ {
		mwc, err := mwcs.Get(ctx, s.WebhookConfig, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get MutatingWebhookConfiguration %s: %w", s.WebhookConfig, err)
		}
		ops := []map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": mwc.ResourceVersion}}
		for i, wh := range mwc.Webhooks {
			if !bytes.Equal(wh.ClientConfig.CABundle, caPEM) {
				ops = append(ops, map[string]any{"op": "add", "path": fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i),
					"value": base64.StdEncoding.EncodeToString(caPEM)})
			}
		}
		if len(ops) == 1 {
			return nil
		}
		body, _ := json.Marshal(ops)
		_, err = mwcs.Patch(ctx, s.WebhookConfig, types.JSONPatchType, body, metav1.PatchOptions{})
		if err == nil {
			return nil
		}
		// A failed test op (someone else wrote in between) is reported as 422.
		if attempt < 5 && (apierrors.IsConflict(err) || apierrors.IsInvalid(err)) {
			continue
		}
		return fmt.Errorf("patch caBundle of MutatingWebhookConfiguration %s: %w", s.WebhookConfig, err)
	}
}

// Start prepares the first serving certificate and patches the caBundle.
func (s *SelfManaged) Start(ctx context.Context) (KeyPair, KeyPair, error) {
	ca, err := s.EnsureCA(ctx)
	if err != nil {
		return KeyPair{}, KeyPair{}, err
	}
	serving, err := s.Issue(ca)
	if err != nil {
		return KeyPair{}, KeyPair{}, fmt.Errorf("write serving certificate to %s: %w", s.Dir, err)
	}
	if err := s.PatchCABundle(ctx, ca.CertPEM); err != nil {
		return KeyPair{}, KeyPair{}, err
	}
	return ca, serving, nil
}

// Maintain renews the serving certificate before it expires and re-asserts
// the caBundle (a re-applied manifest blanks it), every interval until ctx
// is done. Errors are returned through report and retried next round.
func (s *SelfManaged) Maintain(ctx context.Context, ca, serving KeyPair, interval time.Duration, report func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.now().Add(RenewBefore).After(serving.NotAfter()) {
			next, err := s.Issue(ca)
			if err != nil {
				report(fmt.Errorf("renew serving certificate: %w", err))
			} else {
				serving = next
			}
		}
		if err := s.PatchCABundle(ctx, ca.CertPEM); err != nil && ctx.Err() == nil {
			report(err)
		}
	}
}
