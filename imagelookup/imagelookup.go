// Package imagelookup says what a lookup of an image's configuration
// answers, and the one method the injector asks it through (Resolver): the
// ENTRYPOINT, CMD and STOPSIGNAL of each platform of an image. It does no
// I/O and links no registry client, so the injector, which takes a
// Resolver, stays a pure mutation; imagelookup/registry looks images up in
// registries with go-containerregistry.
package imagelookup

import (
	"context"
	"slices"
)

// Resolver looks up the image configurations of image. Pull secrets named
// by the pod (in namespace) are tried before any other credentials.
type Resolver interface {
	Resolve(ctx context.Context, image, namespace string, pullSecrets []string) (*ResolvedImage, error)
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
		if !slices.Equal(first.Entrypoint, c.Entrypoint) || !slices.Equal(first.Cmd, c.Cmd) {
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

// ArgvSize counts the strings of lists and their bytes: what the caps on
// an image's commands (the lookup's, the injector's per pod) measure.
func ArgvSize(lists ...[]string) (entries, size int) {
	for _, l := range lists {
		entries += len(l)
		for _, s := range l {
			size += len(s)
		}
	}
	return entries, size
}

// PlatformKey is the key of a platform in ResolvedImage.Platforms and in
// RESTART_SUPERVISOR_PLATFORM_COMMANDS: "os/arch", or "os/arch/variant".
func PlatformKey(os, arch, variant string) string {
	k := os + "/" + arch
	if variant != "" {
		k += "/" + variant
	}
	return k
}
