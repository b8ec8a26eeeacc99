// Package probe runs the checks of a Kubernetes probe that need the
// network (httpGet, tcpSocket, grpc) and an exec check with its timeout, as the
// kubelet's prober does (pkg/kubelet/prober/prober.go and pkg/probe/http,
// pkg/probe/tcp, pkg/probe/grpc, v1.35.4). It is linked into restart-probe
// only: the supervisor, which runs as PID 1 of every wrapped container,
// starts restart-probe for such a check and never links net, net/http,
// crypto/tls or gRPC itself.
//
// Differences from the kubelet: the host is 127.0.0.1 by default (always
// for grpc, which has no host field), not the pod IP: the check runs inside the pod's network namespace, where loopback
// reaches the same listeners unless the workload binds the pod IP alone.
// Redirects are not followed; a 3xx answer is a success, as the kubelet
// counts it when it does not follow one.
package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

// DefaultHost is where a check without host connects.
const DefaultHost = "127.0.0.1"

// maxBody is how much of a response the check reads, as the kubelet's
// 10 KiB (pkg/probe/http/request.go maxRespBodyLength).
const maxBody = 10 << 10

// Check runs the probe's check once within its timeout and returns nil on
// success, or the reason of the failure. An *ErroredError is neither: the
// kubelet's prober returns such a check as an error, and its worker throws
// the result away (pkg/kubelet/prober/worker.go doProbe, "Prober error,
// throw away the result", v1.37.2), so it counts as no check at all.
func Check(ctx context.Context, p *rules.Probe, env []string) error {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout())
	defer cancel()
	switch {
	case p.Exec != nil:
		return execCheck(ctx, p, env)
	case p.HTTPGet != nil:
		return httpCheck(ctx, p.HTTPGet)
	case p.TCPSocket != nil:
		return tcpCheck(ctx, p.TCPSocket)
	case p.GRPC != nil:
		return grpcCheck(ctx, p.GRPC)
	}
	return errors.New("probe has no handler")
}

func host(h string) string {
	if h == "" {
		return DefaultHost
	}
	return h
}

func execCheck(ctx context.Context, p *rules.Probe, env []string) error {
	cmd := exec.CommandContext(ctx, p.Exec.Command[0], p.Exec.Command[1:]...)
	cmd.Env = env
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("exec %s: timed out after %s", p.Exec.Command[0], p.Timeout())
	}
	if err != nil {
		return fmt.Errorf("exec %s: %v", p.Exec.Command[0], err)
	}
	return nil
}

// URL is the address an httpGet check requests.
func URL(a *rules.HTTPGetAction) string {
	u := url.URL{Scheme: strings.ToLower(a.SchemeOrDefault()), Host: net.JoinHostPort(host(a.Host), strconv.Itoa(int(a.Port)))}
	path := a.PathOrDefault()
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	// The path may carry a query, as the kubelet's formatURL allows.
	if i := strings.IndexByte(path, '?'); i >= 0 {
		u.Path, u.RawQuery = path[:i], path[i+1:]
	} else {
		u.Path = path
	}
	return u.String()
}

// httpGetRequest is the GET of an httpGet action with the kubelet's
// default headers (User-Agent userAgent, Accept */*), which the action's
// headers override; a Host header sets the request's host.
func httpGetRequest(ctx context.Context, a *rules.HTTPGetAction, userAgent string) (*http.Request, error) {
	target := URL(a)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("httpGet %s: %v", target, err)
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "*/*")
	for _, h := range a.HTTPHeaders {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	return req, nil
}

// httpClient is the kubelet's for probes and lifecycle hooks: the
// certificate is not verified, no keep-alive, no proxy, redirects not
// followed (a 3xx is the answer).
func httpClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as the kubelet's prober and lifecycle handler
			DisableKeepAlives: true,
			Proxy:             nil,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// ErroredError is a check that errored rather than failed: upstream its
// result is discarded, neither a success nor a failure.
type ErroredError struct{ Err error }

func (e *ErroredError) Error() string { return e.Err.Error() }
func (e *ErroredError) Unwrap() error { return e.Err }

func httpCheck(ctx context.Context, a *rules.HTTPGetAction) error {
	req, err := httpGetRequest(ctx, a, "kube-probe/restart-probe")
	if err != nil {
		return err
	}
	target := URL(a)
	client := httpClient()
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("httpGet %s: %v", target, err)
	}
	defer resp.Body.Close()
	// pkg/probe/http/http.go DoHTTPProbe (v1.37.2) reads at most 10 KiB of
	// the body; an error reading it (a server that stalls after its
	// headers until the timeout, or resets) is returned as the probe's
	// error, not as a failure, and the worker discards that result. Only
	// the body's truncation at the limit is harmless.
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody)); err != nil {
		return &ErroredError{fmt.Errorf("httpGet %s: reading the response body: %v", target, err)}
	}
	if resp.StatusCode < http.StatusOK || resp.StatusCode >= http.StatusBadRequest {
		return fmt.Errorf("httpGet %s: HTTP status %d", target, resp.StatusCode)
	}
	return nil
}

func tcpCheck(ctx context.Context, a *rules.TCPSocketAction) error {
	addr := net.JoinHostPort(host(a.Host), strconv.Itoa(int(a.Port)))
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("tcpSocket %s: %v", addr, err)
	}
	c.Close()
	return nil
}

// grpcCheck asks the gRPC Health Checking Protocol (grpc.health.v1) for
// the probe's service, as the kubelet's pkg/probe/grpc does: plain text
// (no TLS), success only for SERVING.
func grpcCheck(ctx context.Context, a *rules.GRPCAction) error {
	addr := net.JoinHostPort(DefaultHost, strconv.Itoa(int(a.Port)))
	service := ""
	if a.Service != nil {
		service = *a.Service
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUserAgent("kube-probe/restart-probe"))
	if err != nil {
		return fmt.Errorf("grpc %s: %v", addr, err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		switch grpcstatus.Code(err) {
		case codes.Unimplemented:
			return fmt.Errorf("grpc %s: the server does not implement grpc.health.v1.Health", addr)
		case codes.DeadlineExceeded:
			return fmt.Errorf("grpc %s: timed out", addr)
		}
		return fmt.Errorf("grpc %s: %v", addr, err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("grpc %s: service %q is %s", addr, service, resp.GetStatus())
	}
	return nil
}
