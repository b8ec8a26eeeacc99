package registry

import (
	"context"
	kubeyaml "sigs.k8s.io/yaml"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil/testregistry"
)

func TestResolveSingleArch(t *testing.T) {
	tr := testregistry.New(t)
	tr.Push(t, "registry.test/app:1", testregistry.Image(t, "linux", "amd64", []string{"/app"}, []string{"serve"}))
	r := New(Options{Transport: tr.Transport})
	img, err := r.Resolve(context.Background(), "registry.test/app:1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, ok := img.Uniform()
	if !ok || strings.Join(cfg.Entrypoint, " ") != "/app" || strings.Join(cfg.Cmd, " ") != "serve" {
		t.Errorf("got %+v", img)
	}
	if _, ok := img.Platforms["linux/amd64"]; !ok || !strings.HasPrefix(img.Digest, "sha256:") {
		t.Errorf("platforms %v digest %q", img.Platforms, img.Digest)
	}
}

func TestResolveCmdOnly(t *testing.T) {
	tr := testregistry.New(t)
	tr.Push(t, "registry.test/py:1", testregistry.Image(t, "linux", "amd64", nil, []string{"python", "main.py"}))
	img, err := New(Options{Transport: tr.Transport}).Resolve(context.Background(), "registry.test/py:1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := img.Uniform()
	if len(cfg.Entrypoint) != 0 || strings.Join(cfg.Cmd, " ") != "python main.py" {
		t.Errorf("got %+v", cfg)
	}
}

func TestResolveMultiArchIndex(t *testing.T) {
	tr := testregistry.New(t)
	tr.PushIndex(t, "registry.test/multi:1", testregistry.Index(
		testregistry.PlatformImage{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Img: testregistry.Image(t, "linux", "amd64", []string{"/amd64"}, nil)},
		testregistry.PlatformImage{Platform: v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}, Img: testregistry.Image(t, "linux", "arm", []string{"/armv7"}, nil)},
		testregistry.PlatformImage{Platform: v1.Platform{OS: "unknown", Architecture: "unknown"}, Img: testregistry.Image(t, "unknown", "unknown", nil, nil)},
	))
	img, err := New(Options{Transport: tr.Transport}).Resolve(context.Background(), "registry.test/multi:1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Platforms) != 2 || img.Platforms["linux/amd64"].Entrypoint[0] != "/amd64" || img.Platforms["linux/arm/v7"].Entrypoint[0] != "/armv7" {
		t.Errorf("platforms: %+v", img.Platforms)
	}
	if _, ok := img.Uniform(); ok {
		t.Error("differing platforms reported uniform")
	}
}

func TestResolveAuth(t *testing.T) {
	tr := testregistry.New(t)
	tr.Push(t, "private.test/team/app:2", testregistry.Image(t, "linux", "amd64", []string{"/p"}, nil))
	var gotNS string
	var gotNames []string
	r := New(Options{Transport: tr.Transport,
		PullSecrets: func(_ context.Context, ns string, names []string) ([]corev1.Secret, error) {
			gotNS, gotNames = ns, names
			return []corev1.Secret{
				testregistry.DockerConfigSecret("other", "elsewhere.test", "x", "y"),
				testregistry.DockerConfigSecret("right", "private.test/team", testregistry.PrivateUser, testregistry.PrivatePass),
			}, nil
		}})
	if _, err := r.Resolve(context.Background(), "private.test/team/app:2", "prod", nil); err == nil || !strings.Contains(err.Error(), "registry private.test answered HTTP 401") {
		t.Errorf("without pull secrets: %v", err)
	}
	img, err := r.Resolve(context.Background(), "private.test/team/app:2", "prod", []string{"other", "right"})
	if err != nil {
		t.Fatalf("with pull secrets: %v", err)
	}
	if img.Platforms["linux/amd64"].Entrypoint[0] != "/p" || gotNS != "prod" || len(gotNames) != 2 {
		t.Errorf("got %+v, secrets asked in %q: %v", img, gotNS, gotNames)
	}
	// Wrong credentials fail.
	r = New(Options{Transport: tr.Transport, Keychain: staticKeychain{authn.FromConfig(authn.AuthConfig{Username: "robot", Password: "wrong"})}})
	if _, err := r.Resolve(context.Background(), "private.test/team/app:2", "", nil); err == nil {
		t.Error("wrong password accepted")
	}
}

// podYAML is the pod s describes, for the lookups through the injector.
func podYAML(t *testing.T, s string) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := kubeyaml.UnmarshalStrict([]byte(s), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

type staticKeychain struct{ a authn.Authenticator }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) { return k.a, nil }

func TestResolveTimeout(t *testing.T) {
	tr := testregistry.New(t)
	r := New(Options{Transport: tr.Transport, Timeout: 300 * time.Millisecond})
	start := time.Now()
	_, err := r.Resolve(context.Background(), "slow.test/app:1", "", nil)
	if err == nil || err.Error() != "registry lookup timed out after 300ms" {
		t.Errorf("got %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("lookup took %s despite a 300ms timeout", d)
	}
	// Through the injector: an *EntrypointError naming container and image.
	pod := podYAML(t, `
metadata: {name: p}
spec:
  containers: [{name: app, image: "slow.test/app:1", restartPolicy: Never}]`)
	_, err = injector.New(injector.Options{Resolver: r}).MutatePod(context.Background(), pod)
	if ee, ok := err.(*injector.EntrypointError); !ok || ee.Image != "slow.test/app:1" || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("got %v", err)
	}
}

func TestResolveCache(t *testing.T) {
	tr := testregistry.New(t)
	tr.Push(t, "registry.test/app:1", testregistry.Image(t, "linux", "amd64", []string{"/v1"}, nil))
	r := New(Options{Transport: tr.Transport, TagTTL: time.Minute})
	now := time.Now()
	r.now = func() time.Time { return now }
	ctx := context.Background()

	// Concurrent misses share one request.
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.Resolve(ctx, "registry.test/app:1", "", nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	first, _ := r.Resolve(ctx, "registry.test/app:1", "", nil)
	if n := tr.Manifests.Load(); n != 1 {
		t.Errorf("%d manifest requests for 17 lookups of one tag, want 1", n)
	}
	// By digest: served from the cache, no request at all.
	if _, err := r.Resolve(ctx, "registry.test/app@"+first.Digest, "", nil); err != nil || tr.Manifests.Load() != 1 {
		t.Errorf("digest lookup: err %v, %d requests", err, tr.Manifests.Load())
	}
	// The tag moves; within the TTL the old digest is still used, after it
	// the new image is seen.
	tr.Push(t, "registry.test/app:1", testregistry.Image(t, "linux", "amd64", []string{"/v2"}, nil))
	if img, _ := r.Resolve(ctx, "registry.test/app:1", "", nil); img.Platforms["linux/amd64"].Entrypoint[0] != "/v1" {
		t.Errorf("within TTL: %+v", img)
	}
	now = now.Add(2 * time.Minute)
	img, err := r.Resolve(ctx, "registry.test/app:1", "", nil)
	if err != nil || img.Platforms["linux/amd64"].Entrypoint[0] != "/v2" || tr.Manifests.Load() != 2 {
		t.Errorf("after TTL: %+v %v, %d requests", img, err, tr.Manifests.Load())
	}
}

func TestKeychainMatching(t *testing.T) {
	secret := func(key string) corev1.Secret { return testregistry.DockerConfigSecret("s", key, "u-"+key, "p") }
	kc, err := KeychainFromSecrets([]corev1.Secret{
		secret("*.example.com"), secret("registry.example.com/team"), secret("index.docker.io/v1"), secret("localhost:5000"),
		{Type: corev1.SecretTypeOpaque},
	})
	if err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]string{
		"registry.example.com/team/app:1":  "u-registry.example.com/team",
		"registry.example.com/other/app:1": "u-*.example.com",
		"a.b.example.com/app:1":            "", // "*" is one DNS label
		"busybox:1":                        "u-index.docker.io/v1",
		"localhost:5000/app:1":             "u-localhost:5000",
		"localhost:5001/app:1":             "",
	} {
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := kc.Resolve(r.Context())
		cfg, _ := a.Authorization()
		if cfg.Username != want {
			t.Errorf("%s: user %q, want %q", ref, cfg.Username, want)
		}
	}
	if _, err := KeychainFromSecrets([]corev1.Secret{{Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte("{")}}}); err == nil {
		t.Error("invalid dockerconfigjson accepted")
	}
}

// The Observe hook sees every lookup, marked by whether the cache answered.
func TestResolveObserveCacheHits(t *testing.T) {
	tr := testregistry.New(t)
	tr.Push(t, "registry.test/app:1", testregistry.Image(t, "linux", "amd64", []string{"/v1"}, nil))
	var hits, misses atomic.Int64
	r := New(Options{Transport: tr.Transport, Observe: func(hit bool) {
		if hit {
			hits.Add(1)
		} else {
			misses.Add(1)
		}
	}})
	for i := 0; i < 3; i++ {
		if _, err := r.Resolve(context.Background(), "registry.test/app:1", "", nil); err != nil {
			t.Fatal(err)
		}
	}
	if hits.Load() != 2 || misses.Load() != 1 {
		t.Errorf("3 lookups of one tag: %d hits, %d misses; want 2 and 1", hits.Load(), misses.Load())
	}
}
