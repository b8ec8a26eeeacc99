package injector

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
)

// ResolverOptions configure registry lookups.
type ResolverOptions struct {
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
	Transport http.RoundTripper
	// Observe, when set, is told of every lookup whether the cache
	// answered it (the webhook exports this as a metric).
	Observe func(cacheHit bool)
}

// ImageConfig is the part of an image configuration that decides what a
// container runs.
type ImageConfig struct {
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	// StopSignal is the image's STOPSIGNAL, the signal the runtime stops
	// the container with when the pod does not say otherwise.
	StopSignal string `json:"stopSignal,omitempty"`
}

// ResolvedImage is what a reference points to: the image configuration of
// each platform, keyed "os/arch" or "os/arch/variant" as the supervisor
// expects in RESTART_SUPERVISOR_PLATFORM_COMMANDS.
type ResolvedImage struct {
	Digest    string
	Platforms map[string]ImageConfig
}

// Uniform returns the configuration shared by every platform, or false
// when platforms differ.
func (r *ResolvedImage) Uniform() (ImageConfig, bool) {
	var first *ImageConfig
	for _, c := range r.Platforms {
		if first == nil {
			c := c
			first = &c
			continue
		}
		if !equalStrings(first.Entrypoint, c.Entrypoint) || !equalStrings(first.Cmd, c.Cmd) {
			return ImageConfig{}, false
		}
	}
	if first == nil {
		return ImageConfig{}, false
	}
	return *first, true
}

// StopSignal returns the STOPSIGNAL every platform shares, "" when there is
// none or the platforms disagree.
func (r *ResolvedImage) StopSignal() string {
	sig, first := "", true
	for _, c := range r.Platforms {
		if first {
			sig, first = c.StopSignal, false
		} else if c.StopSignal != sig {
			return ""
		}
	}
	return sig
}

// Resolver looks up image configurations in registries. Results are cached
// by manifest digest (immutable) and tags by digest for TagTTL, and
// concurrent lookups of one reference share a single request.
type Resolver struct {
	opts   ResolverOptions
	group  singleflight.Group
	mu     sync.Mutex
	byDig  map[string]*ResolvedImage
	byTag  map[string]tagEntry
	now    func() time.Time
	lookup func(ctx context.Context, ref name.Reference, kc authn.Keychain) (*ResolvedImage, error)
}

type tagEntry struct {
	digest  string
	expires time.Time
}

// NewResolver returns a Resolver with defaults filled in.
func NewResolver(opts ResolverOptions) *Resolver {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.TagTTL <= 0 {
		opts.TagTTL = time.Minute
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 1024
	}
	if opts.Keychain == nil {
		opts.Keychain = authn.NewMultiKeychain()
	}
	r := &Resolver{opts: opts, byDig: map[string]*ResolvedImage{}, byTag: map[string]tagEntry{}, now: time.Now}
	r.lookup = r.fetch
	return r
}

// Resolve returns the image configurations of image. Pull secrets named by
// the pod (in namespace) are tried before the Resolver's keychain.
func (r *Resolver) Resolve(ctx context.Context, image, namespace string, pullSecrets []string) (*ResolvedImage, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, fmt.Errorf("invalid image reference: %v", err)
	}
	res := r.cached(ref)
	if r.opts.Observe != nil {
		r.opts.Observe(res != nil)
	}
	if res != nil {
		return res, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	v, err, _ := r.group.Do(ref.Name(), func() (any, error) {
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
		res, err := r.lookup(ctx, ref, kc)
		if err != nil {
			return nil, err
		}
		r.store(ref, res)
		return res, nil
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return nil, fmt.Errorf("registry lookup timed out after %s", r.opts.Timeout)
		}
		return nil, err
	}
	return v.(*ResolvedImage), nil
}

func (r *Resolver) cached(ref name.Reference) *ResolvedImage {
	r.mu.Lock()
	defer r.mu.Unlock()
	dig := ""
	if d, ok := ref.(name.Digest); ok {
		dig = d.DigestStr()
	} else if t, ok := r.byTag[ref.Name()]; ok && r.now().Before(t.expires) {
		dig = t.digest
	}
	return r.byDig[dig]
}

func (r *Resolver) store(ref name.Reference, res *ResolvedImage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Eviction is wholesale: a full cache is rare (distinct images in
	// admission traffic) and the next lookup only costs one request.
	if len(r.byDig) >= r.opts.MaxEntries {
		r.byDig = map[string]*ResolvedImage{}
	}
	if len(r.byTag) >= r.opts.MaxEntries {
		r.byTag = map[string]tagEntry{}
	}
	r.byDig[res.Digest] = res
	if _, ok := ref.(name.Tag); ok {
		r.byTag[ref.Name()] = tagEntry{res.Digest, r.now().Add(r.opts.TagTTL)}
	}
}

func (r *Resolver) fetch(ctx context.Context, ref name.Reference, kc authn.Keychain) (*ResolvedImage, error) {
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc)}
	if r.opts.Transport != nil {
		ropts = append(ropts, remote.WithTransport(r.opts.Transport))
	}
	desc, err := remote.Get(ref, ropts...)
	if err != nil {
		return nil, registryErr(ctx, err)
	}
	res := &ResolvedImage{Digest: desc.Digest.String(), Platforms: map[string]ImageConfig{}}
	if !desc.MediaType.IsIndex() {
		img, err := desc.Image()
		if err != nil {
			return nil, registryErr(ctx, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, registryErr(ctx, err)
		}
		res.Platforms[platformKey(cf.OS, cf.Architecture, cf.Variant)] = ImageConfig{cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.StopSignal}
		return res, nil
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, registryErr(ctx, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, registryErr(ctx, err)
	}
	var mu sync.Mutex
	g, _ := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for _, m := range im.Manifests {
		if !m.MediaType.IsImage() || m.Platform == nil || m.Platform.OS == "unknown" {
			continue // attestations and nested indexes carry no runnable config
		}
		m := m
		g.Go(func() error {
			img, err := idx.Image(m.Digest)
			if err != nil {
				return err
			}
			cf, err := img.ConfigFile()
			if err != nil {
				return err
			}
			key := platformKey(m.Platform.OS, m.Platform.Architecture, m.Platform.Variant)
			mu.Lock()
			res.Platforms[key] = ImageConfig{cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.StopSignal}
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, registryErr(ctx, err)
	}
	if len(res.Platforms) == 0 {
		return nil, fmt.Errorf("image index %s lists no runnable platform", res.Digest)
	}
	return res, nil
}

func platformKey(os, arch, variant string) string {
	k := os + "/" + arch
	if variant != "" {
		k += "/" + variant
	}
	return k
}

func registryErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New(strings.Join(strings.Fields(err.Error()), " "))
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var _ v1.Hash
