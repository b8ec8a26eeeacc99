// Package webhook owns the admission webhook server of restart-injector: the
// admission/v1 handler that turns the injector's mutation into a JSON patch,
// serving-certificate loading and hot reload, the self-managed CA mode, the
// detection of clusters that honour restartPolicyRules natively, the
// health and metrics endpoints, and Run, which wires all of these into the
// process that `restart-injector serve` starts. Every mutation, of pods and
// of workload pod templates, lives in injector/; the webhook adds HTTP and,
// for workloads, the check whether the API server keeps restartPolicyRules
// at all.
//
// It is built on net/http and the k8s.io/api admission types rather than
// controller-runtime's webhook package: one handler, one decode, and an
// explicit JSON patch is all it needs, and the result is a smaller binary
// whose timeouts, body cap and shutdown are visible in one file.
package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server runs the HTTPS admission endpoint and the plain-HTTP health and
// metrics endpoint. Health lives on its own port so probes and scrapes need
// no TLS and never compete with the API server's connections.
type Server struct {
	// Handler answers /mutate; normally a *Handler.
	Handler http.Handler
	Certs   *CertWatcher
	Metrics *Metrics
	Log     *slog.Logger
	// ShutdownDelay keeps serving after the stop signal, reporting not ready,
	// so the API server stops picking this replica before it goes away.
	ShutdownDelay time.Duration
	// ShutdownTimeout bounds the drain of in-flight reviews.
	ShutdownTimeout time.Duration
	// ClientCAs, when set, make /mutate require a client certificate
	// signed by one of them (the API server's, see Config.ClientCAFile).
	ClientCAs *x509.CertPool
	// MaxInFlight, when positive, bounds the reviews /mutate answers at
	// once; one more gets 429 with Retry-After (limitInFlight).
	MaxInFlight int

	stopping atomic.Bool
}

// TLSConfig is the serving configuration: TLS 1.2+, HTTP/1.1, the
// certificate from the watcher at every handshake, and with ClientCAs a
// verified client certificate required of every connection.
//
// HTTP/1.1 only: the API server speaks it to every webhook it reaches
// through a Service or at a non-loopback URL, so that concurrent reviews
// open connections of their own and a Service spreads them over the
// replicas (k8s.io/apiserver pkg/util/webhook/client.go, v0.34.4 and
// v0.37.2; kubernetes/kubernetes#75791). It offers HTTP/2 only to a URL on
// loopback, where one multiplexed connection would hold every review on one
// replica; and HTTP/2 is attack surface a webhook does not need
// (CVE-2023-44487).
func (s *Server) TLSConfig() *tls.Config {
	c := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: s.Certs.GetCertificate,
		NextProtos:     []string{"http/1.1"},
	}
	if s.ClientCAs != nil {
		c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, s.ClientCAs
	}
	return c
}

// MutateMux routes the admission endpoint.
func (s *Server) MutateMux() http.Handler {
	mux := http.NewServeMux()
	h := s.Handler
	if s.MaxInFlight > 0 {
		h = limitInFlight(h, s.MaxInFlight, s.Metrics)
	}
	mux.Handle("/mutate", h)
	return mux
}

// HealthMux routes /healthz, /readyz and /metrics.
func (s *Server) HealthMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case s.stopping.Load():
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		case !s.Certs.Loaded():
			http.Error(w, "no serving certificate loaded", http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte("ok\n"))
		}
	})
	if s.Metrics != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(s.Metrics.Registry, promhttp.HandlerOpts{}))
	}
	return mux
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// Serve serves until ctx is done, then drains: it reports not ready for
// ShutdownDelay while still answering reviews, stops accepting connections
// and waits up to ShutdownTimeout for in-flight reviews. mutateLn is a plain
// TCP listener; TLS is added here.
func (s *Server) Serve(ctx context.Context, mutateLn, healthLn net.Listener) error {
	http1 := new(http.Protocols)
	http1.SetHTTP1(true)
	mutate := &http.Server{
		Handler:           s.MutateMux(),
		TLSConfig:         s.TLSConfig(),
		Protocols:         http1,
		ReadHeaderTimeout: 5 * time.Second,
		// The API server's webhook timeout is at most 30 s.
		ReadTimeout:    15 * time.Second,
		WriteTimeout:   35 * time.Second,
		IdleTimeout:    90 * time.Second,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(s.log().Handler(), slog.LevelDebug),
	}
	health := &http.Server{
		Handler:           s.HealthMux(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
	errc := make(chan error, 2)
	go func() { errc <- mutate.Serve(tls.NewListener(mutateLn, mutate.TLSConfig)) }()
	go func() { errc <- health.Serve(healthLn) }()
	s.log().Info("serving", "mutate", "https://"+mutateLn.Addr().String()+"/mutate", "health", "http://"+healthLn.Addr().String())

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		serveErr = fmt.Errorf("server stopped: %w", serveErr)
	}

	s.stopping.Store(true)
	if serveErr == nil && s.ShutdownDelay > 0 {
		s.log().Info("stop requested; not ready, still serving", "for", s.ShutdownDelay)
		time.Sleep(s.ShutdownDelay)
	}
	timeout := s.ShutdownTimeout
	if timeout <= 0 {
		timeout = 20 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := mutate.Shutdown(sctx)
	_ = health.Shutdown(sctx)
	if err != nil {
		_ = mutate.Close()
		err = fmt.Errorf("drain in-flight reviews: %w", err)
	} else {
		s.log().Info("stopped; in-flight reviews drained")
	}
	return errors.Join(serveErr, err)
}
