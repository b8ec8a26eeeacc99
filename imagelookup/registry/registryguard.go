package registry

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/restart-supervisor/restart-supervisor/imagelookup"
)

// What one lookup may read. A lookup reads the manifest of the reference,
// for an index the manifest of each runnable platform, and each platform's
// config blob; nothing else (never a layer).
const (
	// MaxManifestBytes caps a manifest or index. The registries bound what
	// they store: distribution (Docker Hub, Harbor, GitLab) refuses
	// manifests over 4 MiB on push, and containers/image (CRI-O, Podman)
	// refuses to read manifests over 4 MiB on pull. Real ones are far
	// smaller: a single-platform manifest is 0.5–2 kB, the index of an
	// official image with attestations 2–10 kB. 1 MiB is a hundred times
	// the largest of those and keeps one lookup's memory small.
	MaxManifestBytes = 1 << 20
	// MaxConfigBytes caps an image config blob (and any other response
	// body: tokens, errors). containers/image reads at most 4 MiB of a
	// config; real configs are 1–30 kB (their size grows with the history
	// of layers, a few hundred bytes each; an image has at most 127 layers
	// on overlayfs).
	MaxConfigBytes = 1 << 20
	// MaxIndexPlatforms caps the runnable platforms of an index, each of
	// which costs a manifest and a config request. Official multi-platform
	// images list about ten (Go's linux ports are 13; arm adds variants,
	// Windows a few versions); attestation entries (unknown/unknown) and
	// nested indexes are not counted, as they are never fetched.
	MaxIndexPlatforms = 32
	// MaxArgvEntries and MaxArgvBytes cap the ENTRYPOINT and CMD a lookup
	// keeps of one platform's config (entries, and the bytes of their
	// strings): the config's cap bounds what is read, these what is
	// copied into the pod. Real entrypoints are a few entries of a few
	// dozen bytes; the kernel refuses one argv or environment string over
	// 128 KiB (MAX_ARG_STRLEN) and all of them over a quarter of the
	// stack limit (2 MiB by default), so an image past these caps could
	// not be started under the supervisor anyway.
	MaxArgvEntries = 1024
	MaxArgvBytes   = 32 << 10
	// MaxImageArgvBytes caps the ENTRYPOINT and CMD kept of all the
	// platforms of an index together: with platforms that differ, all of
	// them go into one environment string
	// (RESTART_SUPERVISOR_PLATFORM_COMMANDS, MaxPlatformCommandsBytes).
	MaxImageArgvBytes = 64 << 10
)

// keptConfig is what a lookup keeps of one platform's config, refused
// when its ENTRYPOINT and CMD pass MaxArgvEntries or MaxArgvBytes.
func keptConfig(host, digest, platform string, cf *v1.ConfigFile) (imagelookup.ImageConfig, error) {
	entries, size := imagelookup.ArgvSize(cf.Config.Entrypoint, cf.Config.Cmd)
	if entries > MaxArgvEntries || size > MaxArgvBytes {
		return imagelookup.ImageConfig{}, lookupErrorf(nil, "registry %s: image %s: platform %s: ENTRYPOINT and CMD hold %d strings of %d bytes, over the cap of %d strings and %s",
			host, digest, platform, entries, size, MaxArgvEntries, sizeString(MaxArgvBytes))
	}
	return imagelookup.ImageConfig{Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd, StopSignal: cf.Config.StopSignal}, nil
}

// LookupError is a failed lookup described for the pod author: it names the
// registry and what went wrong in the project's own words, never text the
// registry sent (a registry's response body is whatever the host at that
// address chose to send, possibly an internal service's page).
type LookupError struct {
	Msg   string
	cause error
}

func (e *LookupError) Error() string { return e.Msg }

// Unwrap returns the error the lookup failed with, for logs and errors.Is.
func (e *LookupError) Unwrap() error { return e.cause }

func lookupErrorf(cause error, format string, args ...any) *LookupError {
	return &LookupError{Msg: fmt.Sprintf(format, args...), cause: cause}
}

// plainHTTPError refuses a plain-HTTP request to a registry the operator did
// not list as insecure.
type plainHTTPError struct{ host string }

func (e *plainHTTPError) Error() string {
	return fmt.Sprintf("registry %s: plain HTTP is used only for registries the operator lists with --insecure-registry", e.host)
}

// tooLargeError says a response body passed its cap.
type tooLargeError struct {
	host, what string
	limit      int64
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("registry %s: %s exceeds %s", e.host, e.what, sizeString(e.limit))
}

func sizeString(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	if n >= 1<<10 && n%(1<<10) == 0 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// guardTransport is under every request a lookup makes, redirects and token
// requests included: it refuses plain HTTP to hosts not listed as insecure
// and caps every response body, refusing at once when Content-Length says
// the body is over the cap.
type guardTransport struct {
	next     http.RoundTripper
	insecure map[string]bool // host[:port]
}

func (t *guardTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	host := req.URL.Host
	if req.URL.Scheme != "https" && !t.insecure[host] {
		return nil, &plainHTTPError{host: host}
	}
	limit, what := int64(MaxConfigBytes), "a response body"
	if strings.Contains(req.URL.Path, "/manifests/") {
		limit, what = MaxManifestBytes, "a manifest"
	} else if strings.Contains(req.URL.Path, "/blobs/") {
		what = "a config blob"
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > limit {
		resp.Body.Close()
		return nil, &tooLargeError{host: host, what: what, limit: limit}
	}
	resp.Body = &cappedBody{rc: resp.Body, left: limit, err: &tooLargeError{host: host, what: what, limit: limit}}
	return resp, nil
}

// cappedBody fails a read past its cap instead of truncating.
type cappedBody struct {
	rc   io.ReadCloser
	left int64
	err  error
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more than allowed tells "exactly at the cap" from "over".
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			return 0, b.err
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }

// safeError turns what go-containerregistry or the network returned into a
// LookupError naming host. It keeps status codes and the project's own
// messages; it drops response bodies, URLs and addresses.
func safeError(host string, err error) error {
	var le *LookupError
	if errors.As(err, &le) {
		return le
	}
	// A redirect or token request may have gone to another host: the
	// message names the image's registry alone.
	var ph *plainHTTPError
	if errors.As(err, &ph) {
		return lookupErrorf(err, "%s", (&plainHTTPError{host: host}).Error())
	}
	var tl *tooLargeError
	if errors.As(err, &tl) {
		return lookupErrorf(err, "%s", (&tooLargeError{host: host, what: tl.what, limit: tl.limit}).Error())
	}
	var te *transport.Error
	if errors.As(err, &te) {
		msg := fmt.Sprintf("registry %s answered HTTP %d %s", host, te.StatusCode, http.StatusText(te.StatusCode))
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			msg += " (are the pod's imagePullSecrets right?)"
		}
		return lookupErrorf(err, "%s", msg)
	}
	var ce *tls.CertificateVerificationError
	var ue x509.UnknownAuthorityError
	var he x509.HostnameError
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &ce), errors.As(err, &ue), errors.As(err, &he):
		return lookupErrorf(err, "registry %s: its TLS certificate is not trusted", host)
	case errors.As(err, &rh):
		return lookupErrorf(err, "registry %s: no TLS on the registry's port (plain HTTP is used only for registries the operator lists with --insecure-registry)", host)
	}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ne) {
		return lookupErrorf(err, "registry %s: cannot connect", host)
	}
	return lookupErrorf(err, "registry %s: invalid response", host)
}

// NormalizeRegistry returns a registry host[:port] as references name it
// ("docker.io" is "index.docker.io"), or an error naming s.
func NormalizeRegistry(s string) (string, error) {
	s = strings.TrimSpace(s)
	r, err := name.NewRegistry(s, name.StrictValidation)
	if err != nil || s == "" || strings.ContainsAny(s, "/@") {
		return "", fmt.Errorf("registry %q: want HOST or HOST:PORT", s)
	}
	return r.RegistryStr(), nil
}
