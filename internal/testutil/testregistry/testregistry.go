// Package testregistry serves container images from go-containerregistry's
// in-process registry over TLS on loopback, for the tests of the image
// lookup and of the injector's use of it.
package testregistry

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
)

// Registry is go-containerregistry's in-process registry behind a TLS
// server that answers for every host name, so manifests can name images
// such as registry.test/app:1. Requests for host private.test need basic
// auth; requests for host slow.test hang until the client gives up; host
// leaky.test answers 403 with a body no denial may repeat.
type Registry struct {
	Srv *httptest.Server
	// Transport reaches the registry for every host name.
	Transport *http.Transport
	Manifests atomic.Int64 // manifest requests served
	Requests  atomic.Int64 // requests of any kind
	Blobs     atomic.Int64 // blob requests
	// Intercept, when set, answers a request before the registry does
	// when it returns true.
	Intercept atomic.Pointer[func(w http.ResponseWriter, r *http.Request) bool]
}

// The credentials of host private.test.
const (
	PrivateUser = "robot"
	PrivatePass = "s3cret"
)

// New starts a Registry that tests stop with t.Cleanup.
func New(t testing.TB) *Registry {
	t.Helper()
	tr := &Registry{}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	tr.Srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.Requests.Add(1)
		if strings.Contains(r.URL.Path, "/blobs/") && r.Method == http.MethodGet {
			tr.Blobs.Add(1)
		}
		if f := tr.Intercept.Load(); f != nil && (*f)(w, r) {
			return
		}
		host, _, _ := strings.Cut(r.Host, ":")
		if host == "leaky.test" && r.URL.Path != "/v2/" {
			http.Error(w, `{"errors":[{"code":"DENIED","message":"internal page: db-password=hunter2"}]}`, http.StatusForbidden)
			return
		}
		if host == "slow.test" && r.URL.Path != "/v2/" {
			<-r.Context().Done()
			return
		}
		if host == "private.test" {
			if u, p, ok := r.BasicAuth(); !ok || u != PrivateUser || p != PrivatePass {
				w.Header().Set("WWW-Authenticate", `Basic realm="private.test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
		}
		if strings.Contains(r.URL.Path, "/manifests/") && r.Method == http.MethodGet {
			tr.Manifests.Add(1)
		}
		reg.ServeHTTP(w, r)
	}))
	// Clients that give up mid-handshake (timeout tests) are expected.
	tr.Srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	tr.Srv.StartTLS()
	t.Cleanup(tr.Srv.Close)
	base := tr.Srv.Client().Transport.(*http.Transport).Clone()
	addr := tr.Srv.Listener.Addr().String()
	base.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	base.TLSClientConfig = &tls.Config{RootCAs: base.TLSClientConfig.RootCAs, ServerName: "example.com"}
	tr.Transport = base
	return tr
}

func (tr *Registry) writeOpts(ref string) []remote.Option {
	opts := []remote.Option{remote.WithTransport(tr.Transport)}
	if strings.HasPrefix(ref, "private.test/") {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: PrivateUser, Password: PrivatePass}))
	}
	return opts
}

// Push writes img as ref.
func (tr *Registry) Push(t testing.TB, ref string, img v1.Image) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, tr.writeOpts(ref)...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

// PushIndex writes idx as ref.
func (tr *Registry) PushIndex(t testing.TB, ref string, idx v1.ImageIndex) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(r, idx, tr.writeOpts(ref)...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

// Image is a small random image with the given platform and command.
func Image(t testing.TB, os, arch string, entrypoint, cmd []string) v1.Image {
	t.Helper()
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = os, arch
	cf.Config.Entrypoint, cf.Config.Cmd = entrypoint, cmd
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// PlatformImage is one image of an index, for Index.
type PlatformImage struct {
	Platform v1.Platform
	Img      v1.Image
}

// Index is an OCI index of images.
func Index(images ...PlatformImage) v1.ImageIndex {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, pi := range images {
		p := pi.Platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: pi.Img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx
}

// SeedGoldenImages pushes the images the golden manifests refer to.
func SeedGoldenImages(t testing.TB, tr *Registry) {
	tr.Push(t, "registry.test/app:1", Image(t, "linux", "amd64", []string{"/app"}, []string{"--serve", "$(NOT_EXPANDED)"}))
	tr.Push(t, "registry.test/cmdonly:1", Image(t, "linux", "amd64", nil, []string{"python", "main.py"}))
	tr.Push(t, "private.test/team/app:2", Image(t, "linux", "amd64", []string{"/private-app"}, nil))
	tr.PushIndex(t, "registry.test/multi:1", Index(
		PlatformImage{v1.Platform{OS: "linux", Architecture: "amd64"}, Image(t, "linux", "amd64", []string{"/bin/amd64/app"}, []string{"run"})},
		PlatformImage{v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}, Image(t, "linux", "arm64", []string{"/bin/arm64/app"}, []string{"run"})},
		// Build attestations are listed with platform unknown/unknown.
		PlatformImage{v1.Platform{OS: "unknown", Architecture: "unknown"}, Image(t, "unknown", "unknown", nil, nil)},
	))
	nginx := Image(t, "linux", "amd64", []string{"/docker-entrypoint.sh"}, []string{"nginx", "-g", "daemon off;"})
	cf, err := nginx.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config.StopSignal = "SIGQUIT"
	if nginx, err = mutate.ConfigFile(nginx, cf); err != nil {
		t.Fatal(err)
	}
	tr.Push(t, "registry.test/nginx:1", nginx)
	tr.PushIndex(t, "registry.test/uniform:1", Index(
		PlatformImage{v1.Platform{OS: "linux", Architecture: "amd64"}, Image(t, "linux", "amd64", []string{"/uniform"}, []string{"--flag"})},
		PlatformImage{v1.Platform{OS: "linux", Architecture: "arm64"}, Image(t, "linux", "arm64", []string{"/uniform"}, []string{"--flag"})},
	))
}

// DockerConfigSecret is an image pull secret with user and pass for host.
func DockerConfigSecret(name, host, user, pass string) corev1.Secret {
	cfg := `{"auths":{"https://` + host + `":{"username":"` + user + `","password":"` + pass + `"}}}`
	return corev1.Secret{
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(cfg)},
	}
}

// GoldenPullSecrets answers the pull secrets of the injector's golden
// pods as the webhook would read them from the API: private-pull holds
// the credentials of private.test, which SeedGoldenImages's private image
// needs.
func GoldenPullSecrets(_ context.Context, _ string, names []string) ([]corev1.Secret, error) {
	var out []corev1.Secret
	for _, n := range names {
		if n == "private-pull" {
			out = append(out, DockerConfigSecret(n, "private.test", PrivateUser, PrivatePass))
		}
	}
	return out, nil
}
