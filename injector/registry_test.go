package injector

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
)

// testRegistry is go-containerregistry's in-process registry behind a TLS
// server that answers for every host name, so manifests can name images
// such as registry.test/app:1. Requests for host private.test need basic
// auth; requests for host slow.test hang until the client gives up; host
// leaky.test answers 403 with a body no denial may repeat.
type testRegistry struct {
	srv       *httptest.Server
	transport *http.Transport
	manifests atomic.Int64 // manifest requests served
	requests  atomic.Int64 // requests of any kind
	blobs     atomic.Int64 // blob requests
	// intercept, when set, answers a request before the registry does
	// when it returns true.
	intercept atomic.Pointer[func(w http.ResponseWriter, r *http.Request) bool]
}

const (
	privateUser = "robot"
	privatePass = "s3cret"
)

func newTestRegistry(t testing.TB) *testRegistry {
	t.Helper()
	tr := &testRegistry{}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	tr.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.requests.Add(1)
		if strings.Contains(r.URL.Path, "/blobs/") && r.Method == http.MethodGet {
			tr.blobs.Add(1)
		}
		if f := tr.intercept.Load(); f != nil && (*f)(w, r) {
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
			if u, p, ok := r.BasicAuth(); !ok || u != privateUser || p != privatePass {
				w.Header().Set("WWW-Authenticate", `Basic realm="private.test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
		}
		if strings.Contains(r.URL.Path, "/manifests/") && r.Method == http.MethodGet {
			tr.manifests.Add(1)
		}
		reg.ServeHTTP(w, r)
	}))
	// Clients that give up mid-handshake (timeout tests) are expected.
	tr.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	tr.srv.StartTLS()
	t.Cleanup(tr.srv.Close)
	base := tr.srv.Client().Transport.(*http.Transport).Clone()
	addr := tr.srv.Listener.Addr().String()
	base.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	base.TLSClientConfig = &tls.Config{RootCAs: base.TLSClientConfig.RootCAs, ServerName: "example.com"}
	tr.transport = base
	return tr
}

func (tr *testRegistry) writeOpts(ref string) []remote.Option {
	opts := []remote.Option{remote.WithTransport(tr.transport)}
	if strings.HasPrefix(ref, "private.test/") {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: privateUser, Password: privatePass}))
	}
	return opts
}

func (tr *testRegistry) push(t testing.TB, ref string, img v1.Image) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, tr.writeOpts(ref)...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

func (tr *testRegistry) pushIndex(t testing.TB, ref string, idx v1.ImageIndex) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(r, idx, tr.writeOpts(ref)...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

// testImage is a small random image with the given platform and command.
func testImage(t testing.TB, os, arch string, entrypoint, cmd []string) v1.Image {
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

type platformImage struct {
	platform v1.Platform
	img      v1.Image
}

func testIndex(images ...platformImage) v1.ImageIndex {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, pi := range images {
		p := pi.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: pi.img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx
}

// seedGoldenImages pushes the images the golden manifests refer to.
func seedGoldenImages(t testing.TB, tr *testRegistry) {
	tr.push(t, "registry.test/app:1", testImage(t, "linux", "amd64", []string{"/app"}, []string{"--serve", "$(NOT_EXPANDED)"}))
	tr.push(t, "registry.test/cmdonly:1", testImage(t, "linux", "amd64", nil, []string{"python", "main.py"}))
	tr.push(t, "private.test/team/app:2", testImage(t, "linux", "amd64", []string{"/private-app"}, nil))
	tr.pushIndex(t, "registry.test/multi:1", testIndex(
		platformImage{v1.Platform{OS: "linux", Architecture: "amd64"}, testImage(t, "linux", "amd64", []string{"/bin/amd64/app"}, []string{"run"})},
		platformImage{v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}, testImage(t, "linux", "arm64", []string{"/bin/arm64/app"}, []string{"run"})},
		// Build attestations are listed with platform unknown/unknown.
		platformImage{v1.Platform{OS: "unknown", Architecture: "unknown"}, testImage(t, "unknown", "unknown", nil, nil)},
	))
	nginx := testImage(t, "linux", "amd64", []string{"/docker-entrypoint.sh"}, []string{"nginx", "-g", "daemon off;"})
	cf, err := nginx.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config.StopSignal = "SIGQUIT"
	if nginx, err = mutate.ConfigFile(nginx, cf); err != nil {
		t.Fatal(err)
	}
	tr.push(t, "registry.test/nginx:1", nginx)
	tr.pushIndex(t, "registry.test/uniform:1", testIndex(
		platformImage{v1.Platform{OS: "linux", Architecture: "amd64"}, testImage(t, "linux", "amd64", []string{"/uniform"}, []string{"--flag"})},
		platformImage{v1.Platform{OS: "linux", Architecture: "arm64"}, testImage(t, "linux", "arm64", []string{"/uniform"}, []string{"--flag"})},
	))
}
