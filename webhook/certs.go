package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// CertFiles names the serving certificate and key inside a directory, as a
// Secret of type kubernetes.io/tls (and cert-manager) lays them out.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// CertWatcher serves the key pair found in a directory and reloads it when
// the directory changes. It watches the directory rather than the files: the
// kubelet updates a Secret volume by writing a new timestamped directory and
// swapping the `..data` symlink, so the files themselves are never written
// in place and a watch on them would go stale after the first rotation.
type CertWatcher struct {
	dir  string
	log  *slog.Logger
	cert atomic.Pointer[tls.Certificate]
	// onLoad is called after every successful load with the leaf's expiry.
	onLoad func(notAfter time.Time)
}

// NewCertWatcher returns a watcher for dir. It does not read anything yet.
func NewCertWatcher(dir string, log *slog.Logger, onLoad func(notAfter time.Time)) *CertWatcher {
	if log == nil {
		log = slog.Default()
	}
	return &CertWatcher{dir: dir, log: log, onLoad: onLoad}
}

// Load reads the key pair now. A failed load keeps the previous certificate,
// because a half-written rotation must not take a working server down.
func (w *CertWatcher) Load() error {
	certPath, keyPath := filepath.Join(w.dir, CertFile), filepath.Join(w.dir, KeyFile)
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return fmt.Errorf("load serving certificate from %s: %w", w.dir, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("parse serving certificate %s: %w", certPath, err)
	}
	pair.Leaf = leaf
	old := w.cert.Swap(&pair)
	if old == nil || !old.Leaf.Equal(leaf) {
		w.log.Info("serving certificate loaded", "dir", w.dir, "subject", leaf.Subject.String(),
			"dnsNames", leaf.DNSNames, "notAfter", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if w.onLoad != nil {
		w.onLoad(leaf.NotAfter)
	}
	return nil
}

// Loaded reports whether a certificate is available to serve.
func (w *CertWatcher) Loaded() bool { return w.cert.Load() != nil }

// GetCertificate is a tls.Config.GetCertificate that always returns the
// latest loaded key pair.
func (w *CertWatcher) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := w.cert.Load()
	if c == nil {
		return nil, errors.New("no serving certificate loaded yet")
	}
	return c, nil
}

// Watch reloads the key pair on every change in the directory until ctx is
// done. Any event triggers a re-read (the symlink swap produces Create/Remove
// events on `..data` and on the timestamped directory, never a Write on
// tls.crt), and a slow periodic re-read covers missed events.
func (w *CertWatcher) Watch(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", w.dir, err)
	}
	defer fw.Close()
	// The directory may not exist yet (a volume still being populated):
	// keep trying, loading whatever appears.
	for err := fw.Add(w.dir); err != nil; err = fw.Add(w.dir) {
		w.log.Warn("cannot watch certificate directory yet; retrying", "dir", w.dir, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
	if err := w.Load(); err != nil {
		w.log.Debug("certificate not loadable yet", "err", err)
	}
	resync := time.NewTicker(time.Minute)
	defer resync.Stop()
	reload := func(why string) {
		if err := w.Load(); err != nil {
			w.log.Warn("serving certificate not reloaded; keeping the previous one", "reason", why, "err", err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			reload(ev.String())
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			w.log.Warn("certificate directory watch error", "dir", w.dir, "err", err)
		case <-resync.C:
			reload("periodic resync")
		}
	}
}
