// Package registry looks image configurations up in container registries
// with go-containerregistry: the imagelookup.Resolver the webhook, inject
// and docker-args use. It owns what a lookup may read (registryguard.go:
// plain HTTP only to listed registries, every response capped, denials
// without registry text), the cache, and the keychain of a pod's pull
// secrets (keychain.go).
package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"

	"github.com/restart-supervisor/restart-supervisor/imagelookup"
)

// Options configure registry lookups.
type Options struct {
	// Keychain supplies credentials after the pod's pull secrets; nil
	// means anonymous. The CLI passes authn.DefaultKeychain (docker login).
	Keychain authn.Keychain
	// PullSecrets fetches the pod's imagePullSecrets (the webhook reads
	// them from the API server); nil means none are used.
	PullSecrets func(ctx context.Context, namespace string, names []string) ([]corev1.Secret, error)
	// Timeout bounds one lookup, including every platform of an index;
	// default 5s.
	Timeout time.Duration
	// TagTTL is how long a tag stays mapped to a digest; default 1m.
	TagTTL time.Duration
	// MaxEntries bounds each cache; default 1024.
	MaxEntries int
	// Transport for registry requests; nil means remote.DefaultTransport.
	// Every request goes through the resolver's guard on top of it (plain
	// HTTP only to InsecureRegistries, response bodies capped).
	Transport http.RoundTripper
	// InsecureRegistries (host[:port], as NormalizeRegistry returns) are
	// the only registries reached over plain HTTP. Any other registry is
	// reached over HTTPS only, also those go-containerregistry would
	// otherwise try over HTTP (localhost, private addresses, *.local).
	InsecureRegistries []string
	// AllowedRegistries, when not empty, are the only registries looked up
	// (host[:port]); an image of any other registry is refused before any
	// request, pull secret read or cache lookup.
	AllowedRegistries []string
	// MaxCacheBytes bounds the commands kept in the cache; default 16 MiB.
	MaxCacheBytes int
	// Observe, when set, is told of every lookup whether the cache
	// answered it (the webhook exports this as a metric).
	Observe func(cacheHit bool)
}

// Resolver looks up image configurations in registries. Results are cached
// by the credentials used and manifest digest (immutable), tags by digest
// for TagTTL, and concurrent lookups of one reference with the same
// credentials share a single request. A result looked up with a pod's pull
// secrets is thus served only to lookups that present the same
// credentials.
type Resolver struct {
	opts       Options
	insecure   map[string]bool
	allowed    map[string]bool
	transport  http.RoundTripper
	group      singleflight.Group
	mu         sync.Mutex
	byDig      map[string]*imagelookup.ResolvedImage // authKey + "@" + digest
	byTag      map[string]tagEntry                   // authKey + " " + reference
	cacheBytes int
	now        func() time.Time
	lookup     func(ctx context.Context, ref name.Reference, kc authn.Keychain) (*imagelookup.ResolvedImage, error)
}

var _ imagelookup.Resolver = (*Resolver)(nil)

type tagEntry struct {
	digest  string
	expires time.Time
}

// New returns a Resolver with defaults filled in.
func New(opts Options) *Resolver {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.TagTTL <= 0 {
		opts.TagTTL = time.Minute
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 1024
	}
	if opts.MaxCacheBytes <= 0 {
		opts.MaxCacheBytes = 16 << 20
	}
	if opts.Keychain == nil {
		opts.Keychain = authn.NewMultiKeychain()
	}
	r := &Resolver{opts: opts, byDig: map[string]*imagelookup.ResolvedImage{}, byTag: map[string]tagEntry{}, now: time.Now,
		insecure: registrySet(opts.InsecureRegistries), allowed: registrySet(opts.AllowedRegistries)}
	next := opts.Transport
	if next == nil {
		next = remote.DefaultTransport
	}
	r.transport = &guardTransport{next: next, insecure: r.insecure}
	r.lookup = r.fetch
	return r
}

// registrySet normalizes registries, dropping those that do not parse (the
// CLI has refused them already with NormalizeRegistry).
func registrySet(regs []string) map[string]bool {
	set := map[string]bool{}
	for _, s := range regs {
		if n, err := NormalizeRegistry(s); err == nil {
			set[n] = true
		}
	}
	return set
}

// Resolve returns the image configurations of image. Pull secrets named by
// the pod (in namespace) are tried before the Resolver's keychain.
func (r *Resolver) Resolve(ctx context.Context, image, namespace string, pullSecrets []string) (*imagelookup.ResolvedImage, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, fmt.Errorf("invalid image reference: %v", err)
	}
	host := ref.Context().RegistryStr()
	if len(r.allowed) > 0 && !r.allowed[host] {
		return nil, &LookupError{Msg: fmt.Sprintf("registry %s: the operator restricts image lookups to other registries (--allowed-registries)", host)}
	}
	if r.insecure[host] {
		// Let go-containerregistry try plain HTTP for this host (after HTTPS).
		if ref, err = name.ParseReference(image, name.Insecure); err != nil {
			return nil, fmt.Errorf("invalid image reference: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	kc := r.opts.Keychain
	if r.opts.PullSecrets != nil && len(pullSecrets) > 0 {
		secrets, err := r.opts.PullSecrets(ctx, namespace, pullSecrets)
		if err != nil {
			return nil, fmt.Errorf("reading imagePullSecrets: %v", err)
		}
		skc, err := KeychainFromSecrets(secrets)
		if err != nil {
			return nil, err
		}
		kc = authn.NewMultiKeychain(skc, kc)
	}
	key, err := authKey(kc, ref)
	if err != nil {
		return nil, err
	}
	res := r.cached(key, ref)
	if r.opts.Observe != nil {
		r.opts.Observe(res != nil)
	}
	if res != nil {
		return res, nil
	}
	v, err, _ := r.group.Do(key+" "+ref.Name(), func() (any, error) {
		res, err := r.lookup(ctx, ref, kc)
		if err != nil {
			return nil, err
		}
		r.store(key, ref, res)
		return res, nil
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return nil, fmt.Errorf("registry lookup timed out after %s", r.opts.Timeout)
		}
		return nil, err
	}
	return v.(*imagelookup.ResolvedImage), nil
}

// authKey identifies the credentials kc presents for ref's repository: a
// hash, so that the cache holds no secret.
func authKey(kc authn.Keychain, ref name.Reference) (string, error) {
	a, err := kc.Resolve(ref.Context())
	if err != nil {
		return "", lookupErrorf(err, "registry %s: resolving credentials failed", ref.Context().RegistryStr())
	}
	cfg, err := a.Authorization()
	if err != nil {
		return "", lookupErrorf(err, "registry %s: reading credentials failed", ref.Context().RegistryStr())
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

func (r *Resolver) cached(key string, ref name.Reference) *imagelookup.ResolvedImage {
	r.mu.Lock()
	defer r.mu.Unlock()
	dig := ""
	if d, ok := ref.(name.Digest); ok {
		dig = d.DigestStr()
	} else if t, ok := r.byTag[key+" "+ref.Name()]; ok && r.now().Before(t.expires) {
		dig = t.digest
	}
	return r.byDig[key+"@"+dig]
}

func (r *Resolver) store(key string, ref name.Reference, res *imagelookup.ResolvedImage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Eviction is wholesale: a full cache is rare (distinct images in
	// admission traffic) and the next lookup only costs one request.
	size := cacheSize(res)
	if len(r.byDig) >= r.opts.MaxEntries || r.cacheBytes+size > r.opts.MaxCacheBytes {
		r.byDig, r.cacheBytes = map[string]*imagelookup.ResolvedImage{}, 0
	}
	if len(r.byTag) >= r.opts.MaxEntries {
		r.byTag = map[string]tagEntry{}
	}
	if size > r.opts.MaxCacheBytes {
		return
	}
	r.byDig[key+"@"+res.Digest] = res
	r.cacheBytes += size
	if _, ok := ref.(name.Tag); ok {
		r.byTag[key+" "+ref.Name()] = tagEntry{res.Digest, r.now().Add(r.opts.TagTTL)}
	}
}

// cacheSize is about the bytes the cache keeps for r.
func cacheSize(r *imagelookup.ResolvedImage) int {
	n := len(r.Digest)
	for k, c := range r.Platforms {
		n += len(k) + len(c.StopSignal) + 64
		for _, s := range append(c.Entrypoint[:len(c.Entrypoint):len(c.Entrypoint)], c.Cmd...) {
			n += len(s) + 16
		}
	}
	return n
}

// fetch reads what the lookup needs, checking each descriptor's size against
// the caps before the request: the reference's manifest (capped by the
// guard), for an index at most MaxIndexPlatforms platform manifests, and
// one config blob per platform. go-containerregistry reads a blob no
// further than its descriptor's size and checks its digest.
func (r *Resolver) fetch(ctx context.Context, ref name.Reference, kc authn.Keychain) (*imagelookup.ResolvedImage, error) {
	host := ref.Context().RegistryStr()
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc), remote.WithTransport(r.transport)}
	desc, err := remote.Get(ref, ropts...)
	if err != nil {
		return nil, registryErr(ctx, host, err)
	}
	res := &imagelookup.ResolvedImage{Digest: desc.Digest.String(), Platforms: map[string]imagelookup.ImageConfig{}}
	if !desc.MediaType.IsIndex() {
		img, err := desc.Image()
		if err != nil {
			return nil, registryErr(ctx, host, err)
		}
		cf, err := configFile(host, img)
		if err != nil {
			return nil, registryErr(ctx, host, err)
		}
		key := imagelookup.PlatformKey(cf.OS, cf.Architecture, cf.Variant)
		if res.Platforms[key], err = keptConfig(host, res.Digest, key, cf); err != nil {
			return nil, err
		}
		return res, nil
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, registryErr(ctx, host, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, registryErr(ctx, host, err)
	}
	var runnable []v1.Descriptor
	for _, m := range im.Manifests {
		if !m.MediaType.IsImage() || m.Platform == nil || m.Platform.OS == "unknown" {
			continue // attestations and nested indexes carry no runnable config
		}
		if m.Size > MaxManifestBytes {
			return nil, lookupErrorf(nil, "registry %s: image index %s lists a manifest of %d bytes, over the %s cap",
				host, res.Digest, m.Size, sizeString(MaxManifestBytes))
		}
		runnable = append(runnable, m)
	}
	if len(runnable) > MaxIndexPlatforms {
		return nil, lookupErrorf(nil, "registry %s: image index %s lists %d platforms, over the cap of %d",
			host, res.Digest, len(runnable), MaxIndexPlatforms)
	}
	var mu sync.Mutex
	total := 0 // argv bytes kept, under mu
	var failed atomic.Bool
	g, _ := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for _, m := range runnable {
		g.Go(func() error {
			// After a refusal, the platforms not yet fetched are not:
			// the refusal stands whatever they hold.
			if failed.Load() {
				return nil
			}
			err := func() error {
				img, err := idx.Image(m.Digest)
				if err != nil {
					return err
				}
				cf, err := configFile(host, img)
				if err != nil {
					return err
				}
				key := imagelookup.PlatformKey(m.Platform.OS, m.Platform.Architecture, m.Platform.Variant)
				kept, err := keptConfig(host, res.Digest, key, cf)
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				_, size := imagelookup.ArgvSize(kept.Entrypoint, kept.Cmd)
				if total += size; total > MaxImageArgvBytes {
					return lookupErrorf(nil, "registry %s: image index %s: the ENTRYPOINT and CMD of its platforms hold more than %s together, over the cap",
						host, res.Digest, sizeString(MaxImageArgvBytes))
				}
				res.Platforms[key] = kept
				return nil
			}()
			if err != nil {
				failed.Store(true)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, registryErr(ctx, host, err)
	}
	if len(res.Platforms) == 0 {
		return nil, fmt.Errorf("image index %s lists no runnable platform", res.Digest)
	}
	return res, nil
}

// configFile reads img's config after checking the size its manifest
// declares for it.
func configFile(host string, img v1.Image) (*v1.ConfigFile, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	if m.Config.Size > MaxConfigBytes {
		return nil, lookupErrorf(nil, "registry %s: image config %s is %d bytes, over the %s cap",
			host, m.Config.Digest, m.Config.Size, sizeString(MaxConfigBytes))
	}
	return img.ConfigFile()
}

func registryErr(ctx context.Context, host string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return safeError(host, err)
}
