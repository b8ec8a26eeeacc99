package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// secretVolume lays out dir the way the kubelet's atomic writer fills a
// Secret volume: the files live in a timestamped directory, `..data` links
// to it, and the visible names link through `..data`. An update writes a new
// timestamped directory and renames a fresh `..data_tmp` link over `..data`.
type secretVolume struct {
	t   *testing.T
	dir string
	gen int
}

func (v *secretVolume) publish(serving, ca KeyPair) {
	v.t.Helper()
	v.gen++
	ts := filepath.Join(v.dir, "..2026_11_30_15_00_0"+string(rune('0'+v.gen)))
	if err := os.Mkdir(ts, 0o755); err != nil {
		v.t.Fatal(err)
	}
	for name, data := range map[string][]byte{CertFile: serving.CertPEM, KeyFile: serving.KeyPEM, CAFile: ca.CertPEM} {
		if err := os.WriteFile(filepath.Join(ts, name), data, 0o644); err != nil {
			v.t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	for _, name := range []string{CertFile, KeyFile, CAFile} {
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				v.t.Fatal(err)
			}
		}
	}
}

func servingPair(t *testing.T, name string) (KeyPair, KeyPair) {
	t.Helper()
	ca, err := NewCA("ca-"+name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServingCert(ca, []string{name}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return s, ca
}

func servedName(t *testing.T, w *CertWatcher) string {
	t.Helper()
	c, err := w.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.Subject.CommonName
}

// The ..data swap is picked up both through inotify and by polling, the
// fallback where inotify cannot be set up.
func TestCertReloadOnSecretSymlinkSwap(t *testing.T) {
	t.Run("inotify", func(t *testing.T) { testCertReloadOnSwap(t, false) })
	t.Run("poll", func(t *testing.T) { testCertReloadOnSwap(t, true) })
}

func testCertReloadOnSwap(t *testing.T, poll bool) {
	dir := t.TempDir()
	vol := &secretVolume{t: t, dir: dir}
	s1, ca1 := servingPair(t, "first.example")
	vol.publish(s1, ca1)

	var expiries []time.Time
	loaded := make(chan time.Time, 16)
	w := NewCertWatcher(dir, testLogger(t), func(nt time.Time) { loaded <- nt })
	w.forcePoll, w.poll = poll, 50*time.Millisecond
	if _, err := w.GetCertificate(nil); err == nil {
		t.Fatal("certificate served before any load")
	}
	if err := w.Load(); err != nil {
		t.Fatal(err)
	}
	expiries = append(expiries, <-loaded)
	if got := servedName(t, w); got != "first.example" {
		t.Fatalf("serving %q", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Watch(ctx) }()
	time.Sleep(100 * time.Millisecond) // let the watch be established

	s2, ca2 := servingPair(t, "second.example")
	vol.publish(s2, ca2)
	deadline := time.After(10 * time.Second)
	for servedName(t, w) != "second.example" {
		select {
		case <-deadline:
			t.Fatalf("still serving %q after the ..data swap", servedName(t, w))
		case nt := <-loaded:
			expiries = append(expiries, nt)
		}
	}

	// A broken update keeps the working certificate.
	broken := s2
	broken.KeyPEM = s1.KeyPEM // key does not match certificate
	vol.publish(broken, ca2)
	time.Sleep(300 * time.Millisecond)
	if got := servedName(t, w); got != "second.example" {
		t.Fatalf("after a broken update serving %q", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for len(loaded) > 0 {
		expiries = append(expiries, <-loaded)
	}
	if len(expiries) < 2 {
		t.Errorf("onLoad called %d times", len(expiries))
	}
}

// A directory that does not exist when the watch starts is served from as
// soon as it is filled, and a later swap in it is still seen.
func TestCertWatchDirectoryAppearsLater(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	w := NewCertWatcher(dir, testLogger(t), nil)
	w.poll = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Watch(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(100 * time.Millisecond)
	if w.Loaded() {
		t.Fatal("loaded a certificate from a missing directory")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	vol := &secretVolume{t: t, dir: dir}
	for i, name := range []string{"first.example", "second.example"} {
		s, ca := servingPair(t, name)
		vol.publish(s, ca)
		deadline := time.Now().Add(10 * time.Second)
		for !w.Loaded() || servedName(t, w) != name {
			if time.Now().After(deadline) {
				t.Fatalf("update %d: %s not served", i, name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestServingCertChainsToCA(t *testing.T) {
	ca, err := NewCA("test-ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	names := ServiceDNSNames("restart-injector", "restart-supervisor")
	s, err := NewServingCert(ca, names, []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	leaf, _, err := s.parse()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range append(names, "127.0.0.1") {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: n, Roots: pool}); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "other.svc", Roots: pool}); err == nil {
		t.Error("certificate valid for a name it was not issued for")
	}
	if d := time.Until(s.NotAfter()); d < ServingLifetime-2*time.Hour || d > ServingLifetime {
		t.Errorf("serving lifetime %v", d)
	}
	if _, err := tls.X509KeyPair(s.CertPEM, s.KeyPEM); err != nil {
		t.Errorf("serving pair unusable by crypto/tls: %v", err)
	}
}
