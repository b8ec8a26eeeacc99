package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"

	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil/testregistry"
)

// hugeSize is the size of the hostile config and manifest below: far past
// the caps, small enough that the test's own hashing stays quick.
const hugeSize = 64 << 20

// repeatReader yields n bytes: prefix, then filler, then suffix, from
// fixed buffers.
type repeatReader struct {
	prefix, suffix string
	filler         []byte
	n, off         int64
}

func newRepeatReader(prefix, suffix string, n int64) *repeatReader {
	return &repeatReader{prefix: prefix, suffix: suffix, filler: []byte(strings.Repeat("A", 32<<10)), n: n}
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	if int64(len(p)) > r.n-r.off {
		p = p[:r.n-r.off]
	}
	var n int
	switch {
	case r.off < int64(len(r.prefix)):
		n = copy(p, r.prefix[r.off:])
	case r.off >= r.n-int64(len(r.suffix)):
		n = copy(p, r.suffix[r.off-(r.n-int64(len(r.suffix))):])
	default:
		end := min(int64(len(p)), r.n-int64(len(r.suffix))-r.off)
		n = copy(p[:end], r.filler)
	}
	r.off += int64(n)
	return n, nil
}

// allocBound is a generous bound on what one refused lookup may allocate:
// a few capped reads and their decoding, far below the sizes offered.
const allocBound = 24 << 20

// A registry that stores a config of 64 MiB (declared as such in the
// manifest) is refused before the config is requested.
func TestResolveRefusesHugeConfig(t *testing.T) {
	tr := testregistry.New(t)
	cfgPrefix, cfgSuffix := `{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/x"]},"history":[{"comment":"`, `"}]}`
	h := sha256.New()
	if _, err := io.Copy(h, newRepeatReader(cfgPrefix, cfgSuffix, hugeSize)); err != nil {
		t.Fatal(err)
	}
	cfgDigest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	manifest, _ := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.DockerManifestSchema2,
		Config: v1.Descriptor{MediaType: types.DockerConfigJSON, Size: hugeSize, Digest: v1.Hash{Algorithm: "sha256", Hex: cfgDigest[7:]}}})
	f := func(w http.ResponseWriter, r *http.Request) bool {
		switch r.URL.Path {
		case "/v2/huge/manifests/1":
			w.Header().Set("Content-Type", string(types.DockerManifestSchema2))
			_, _ = w.Write(manifest)
		case "/v2/huge/blobs/" + cfgDigest:
			w.Header().Set("Content-Length", fmt.Sprint(hugeSize))
			_, _ = io.Copy(w, newRepeatReader(cfgPrefix, cfgSuffix, hugeSize))
		default:
			return false
		}
		return true
	}
	tr.Intercept.Store(&f)
	r := New(Options{Transport: tr.Transport})
	var err error
	cost := testutil.HeapCost(func() { _, err = r.Resolve(context.Background(), "registry.test/huge:1", "", nil) })
	t.Logf("refused lookup allocated %d KiB; %d blob requests", cost>>10, tr.Blobs.Load())
	if err == nil || !strings.Contains(err.Error(), "registry registry.test: image config "+cfgDigest+" is 67108864 bytes, over the 1 MiB cap") {
		t.Errorf("got %v", err)
	}
	if n := tr.Blobs.Load(); n != 0 {
		t.Errorf("%d blob requests for a config over the cap", n)
	}
	if cost > allocBound {
		t.Errorf("a refused lookup allocated %d MiB", cost>>20)
	}
}

// A manifest of 64 MiB, sent without Content-Length, is cut at the cap.
func TestResolveRefusesHugeManifest(t *testing.T) {
	tr := testregistry.New(t)
	f := func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/v2/huge/manifests/1" {
			return false
		}
		w.Header().Set("Content-Type", string(types.OCIManifestSchema1))
		_, _ = io.Copy(w, newRepeatReader(`{"schemaVersion":2,"annotations":{"a":"`, `"}}`, hugeSize))
		return true
	}
	tr.Intercept.Store(&f)
	r := New(Options{Transport: tr.Transport})
	var err error
	cost := testutil.HeapCost(func() { _, err = r.Resolve(context.Background(), "registry.test/huge:1", "", nil) })
	t.Logf("refused lookup allocated %d KiB", cost>>10)
	if err == nil || err.Error() != "registry registry.test: a manifest exceeds 1 MiB" {
		t.Errorf("got %v", err)
	}
	if cost > allocBound {
		t.Errorf("a refused lookup allocated %d MiB", cost>>20)
	}
}

// An index of 64 runnable platforms is refused after the index alone.
func TestResolveRefusesLargeIndex(t *testing.T) {
	tr := testregistry.New(t)
	img := testregistry.Image(t, "linux", "amd64", []string{"/app"}, nil)
	var pis []testregistry.PlatformImage
	for i := 0; i < 64; i++ {
		pis = append(pis, testregistry.PlatformImage{Platform: v1.Platform{OS: "linux", Architecture: fmt.Sprintf("arch%d", i)}, Img: img})
	}
	tr.PushIndex(t, "registry.test/wide:1", testregistry.Index(pis...))
	before := tr.Manifests.Load()
	r := New(Options{Transport: tr.Transport})
	var err error
	cost := testutil.HeapCost(func() { _, err = r.Resolve(context.Background(), "registry.test/wide:1", "", nil) })
	t.Logf("refused lookup allocated %d KiB", cost>>10)
	if err == nil || !strings.Contains(err.Error(), "lists 64 platforms, over the cap of 32") {
		t.Errorf("got %v", err)
	}
	if n := tr.Manifests.Load() - before; n != 1 {
		t.Errorf("%d manifest requests, want the index's alone", n)
	}
	if cost > allocBound {
		t.Errorf("a refused lookup allocated %d MiB", cost>>20)
	}
	// 32 platforms are within the cap.
	tr.PushIndex(t, "registry.test/wide:2", testregistry.Index(pis[:32]...))
	if res, err := r.Resolve(context.Background(), "registry.test/wide:2", "", nil); err != nil || len(res.Platforms) != 32 {
		t.Errorf("32 platforms: %v", err)
	}
}

// A registry's response body never reaches the denial: status and host do.
func TestResolveDoesNotEchoResponseBodies(t *testing.T) {
	tr := testregistry.New(t)
	_, err := New(Options{Transport: tr.Transport}).Resolve(context.Background(), "leaky.test/app:1", "", nil)
	if err == nil || err.Error() != "registry leaky.test answered HTTP 403 Forbidden (are the pod's imagePullSecrets right?)" {
		t.Errorf("got %v", err)
	}
}

// plainRegistry is the in-process registry over plain HTTP on 127.0.0.1.
func plainRegistry(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var requests atomic.Int64
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &requests
}

// Plain HTTP only to the registries the operator lists.
func TestResolvePlainHTTPOnlyWhenListed(t *testing.T) {
	srv, requests := plainRegistry(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	ref, err := name.ParseReference(host + "/app:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, testregistry.Image(t, "linux", "amd64", []string{"/plain"}, nil)); err != nil {
		t.Fatal(err)
	}
	requests.Store(0)
	_, err = New(Options{}).Resolve(context.Background(), host+"/app:1", "", nil)
	if err == nil || !strings.Contains(err.Error(), "--insecure-registry") {
		t.Errorf("unlisted plain-HTTP registry: got %v", err)
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d HTTP requests reached an unlisted plain-HTTP registry", n)
	}
	res, err := New(Options{InsecureRegistries: []string{host}}).Resolve(context.Background(), host+"/app:1", "", nil)
	if err != nil || res.Platforms["linux/amd64"].Entrypoint[0] != "/plain" {
		t.Errorf("listed: %+v %v", res, err)
	}
}

// --allowed-registries: other registries are refused with no traffic.
func TestResolveAllowedRegistries(t *testing.T) {
	tr := testregistry.New(t)
	tr.Push(t, "registry.test/app:1", testregistry.Image(t, "linux", "amd64", []string{"/app"}, nil))
	tr.Push(t, "other.test/app:1", testregistry.Image(t, "linux", "amd64", []string{"/other"}, nil))
	var secretReads atomic.Int64
	r := New(Options{Transport: tr.Transport, AllowedRegistries: []string{"registry.test"},
		PullSecrets: func(context.Context, string, []string) ([]corev1.Secret, error) {
			secretReads.Add(1)
			return nil, nil
		}})
	before := tr.Requests.Load()
	_, err := r.Resolve(context.Background(), "other.test/app:1", "ns", []string{"pull"})
	if err == nil || err.Error() != "registry other.test: the operator restricts image lookups to other registries (--allowed-registries)" {
		t.Errorf("got %v", err)
	}
	if n := tr.Requests.Load() - before; n != 0 || secretReads.Load() != 0 {
		t.Errorf("%d registry requests and %d secret reads for a registry not allowed", n, secretReads.Load())
	}
	if _, err := r.Resolve(context.Background(), "registry.test/app:1", "", nil); err != nil {
		t.Errorf("allowed registry: %v", err)
	}
}

// A private image looked up with one pod's pull secrets is not served from
// the cache to a lookup without them, by tag or by digest.
func TestResolveCacheKeyedByCredentials(t *testing.T) {
	tr := testregistry.New(t)
	tr.Push(t, "private.test/team/app:2", testregistry.Image(t, "linux", "amd64", []string{"/p"}, nil))
	r := New(Options{Transport: tr.Transport,
		PullSecrets: func(_ context.Context, _ string, names []string) ([]corev1.Secret, error) {
			return []corev1.Secret{testregistry.DockerConfigSecret("right", "private.test", testregistry.PrivateUser, testregistry.PrivatePass)}, nil
		}})
	ctx := context.Background()
	a, err := r.Resolve(ctx, "private.test/team/app:2", "team-a", []string{"right"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Resolve(ctx, "private.test/team/app:2", "team-b", nil); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("by tag without credentials: got %v", err)
	}
	if _, err := r.Resolve(ctx, "private.test/team/app@"+a.Digest, "team-b", nil); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("by digest without credentials: got %v", err)
	}
	// The same credentials are still served from the cache.
	n := tr.Manifests.Load()
	if _, err := r.Resolve(ctx, "private.test/team/app:2", "team-c", []string{"right"}); err != nil || tr.Manifests.Load() != n {
		t.Errorf("same credentials: %v, %d more manifest requests", err, tr.Manifests.Load()-n)
	}
}

func TestNormalizeRegistry(t *testing.T) {
	for in, want := range map[string]string{"docker.io": "index.docker.io", "registry.test:5000": "registry.test:5000", " r.test ": "r.test", "[::1]:5000": "[::1]:5000"} {
		if got, err := NormalizeRegistry(in); err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "r.test/path", "https://r.test", "r.test@x"} {
		if got, err := NormalizeRegistry(in); err == nil {
			t.Errorf("%q accepted as %q", in, got)
		}
	}
}

// A redirect to plain HTTP is refused like a plain-HTTP registry, and the
// denial names the image's registry, not the redirect's target.
func TestResolveRefusesRedirectToPlainHTTP(t *testing.T) {
	tr := testregistry.New(t)
	f := func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/v2/redir/manifests/1" {
			return false
		}
		http.Redirect(w, r, "http://internal.test/v2/redir/manifests/1", http.StatusFound)
		return true
	}
	tr.Intercept.Store(&f)
	_, err := New(Options{Transport: tr.Transport}).Resolve(context.Background(), "registry.test/redir:1", "", nil)
	if err == nil || err.Error() != "registry registry.test: plain HTTP is used only for registries the operator lists with --insecure-registry" {
		t.Errorf("got %v", err)
	}
}
