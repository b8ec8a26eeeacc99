package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/restart-supervisor/restart-supervisor/internal/dirwatch"
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

	// Used by Watch only.
	forcePoll    bool          // tests: poll even where inotify works
	poll         time.Duration // poll interval; 0 means 2s
	watchRetried bool          // inotify was tried again once the directory appeared
	seen         string        // the files as the last reload attempt read them
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

// Watch reloads the key pair whenever the directory may have changed,
// until ctx is done. Any change triggers a re-read (the symlink swap
// produces Create/Remove events on `..data` and on the timestamped
// directory, never a Write on tls.crt), and a slow periodic re-read covers
// anything missed. Where inotify cannot be set up, including a directory
// that does not exist yet (a volume still being populated), the directory
// is polled; a poll that first sees the directory switches to inotify.
// Only one Watch may run at a time for a CertWatcher.
func (w *CertWatcher) Watch(ctx context.Context) error {
	dw := w.newDirWatch()
	defer func() { dw.Close() }()
	if dw.Polling() {
		w.log.Warn("cannot watch certificate directory; polling it", "dir", w.dir, "every", w.pollInterval())
	}
	w.reloadIfChanged("watch started")
	resync := time.NewTicker(time.Minute)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-dw.C():
			if dw.Polling() && !w.forcePoll && !w.watchRetried {
				if _, err := os.Stat(w.dir); err == nil {
					// The directory appeared: inotify may work now. Tried
					// once, so a kernel without inotify is not asked on
					// every poll.
					w.watchRetried = true
					if next := w.newDirWatch(); !next.Polling() {
						dw.Close()
						dw = next
						w.log.Info("watching certificate directory", "dir", w.dir)
					} else {
						next.Close()
					}
				}
			}
			w.reloadIfChanged("directory changed")
		case <-resync.C:
			w.reloadIfChanged("periodic resync")
		}
	}
}

func (w *CertWatcher) pollInterval() time.Duration {
	if w.poll > 0 {
		return w.poll
	}
	return 2 * time.Second
}

func (w *CertWatcher) newDirWatch() *dirwatch.Watcher {
	return dirwatch.New(w.dir, dirwatch.Options{ForcePoll: w.forcePoll, PollInterval: w.pollInterval()})
}

// reloadIfChanged loads the key pair unless the files hold what the last
// attempt read: a kubelet swap signals several times, a poll signals on
// every tick, and a broken pair should be reported once, not on each.
func (w *CertWatcher) reloadIfChanged(why string) {
	cert, certErr := os.ReadFile(filepath.Join(w.dir, CertFile))
	key, keyErr := os.ReadFile(filepath.Join(w.dir, KeyFile))
	seen := string(cert) + "\x00" + string(key) + "\x00" + fmt.Sprint(certErr, keyErr)
	if seen == w.seen {
		return
	}
	w.seen = seen
	if err := w.Load(); err != nil {
		w.log.Warn("serving certificate not reloaded; keeping the previous one", "reason", why, "err", err)
	}
}
