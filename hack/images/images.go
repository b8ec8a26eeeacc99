package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The OCI annotation keys (image-spec annotations.md) the images carry, as
// config labels and as manifest and index annotations.
const (
	annVersion     = "org.opencontainers.image.version"
	annSource      = "org.opencontainers.image.source"
	annRevision    = "org.opencontainers.image.revision"
	annCreated     = "org.opencontainers.image.created"
	annTitle       = "org.opencontainers.image.title"
	annDescription = "org.opencontainers.image.description"
	annRefName     = "org.opencontainers.image.ref.name"
)

// nonroot is the user both images run as (distroless' nonroot), as in the
// Dockerfiles' USER 65532:65532.
const nonroot = "65532:65532"

// file is one regular file of an image's single layer.
type file struct {
	path string // in the image, without the leading slash
	mode int64
	// src is where the file comes from for a platform: a binary under the
	// binaries' directory (DIR/<os>_<arch>/NAME), or the CA bundle.
	src func(in Inputs, p v1.Platform) string
}

func binary(name string) func(Inputs, v1.Platform) string {
	return func(in Inputs, p v1.Platform) string {
		return filepath.Join(in.BinDir, p.OS+"_"+p.Architecture, name)
	}
}

// imageSpec is one image: what Dockerfile.supervisor or Dockerfile.injector
// builds (their prebuilt targets), written out as data.
type imageSpec struct {
	name        string // repository name under the registry prefix
	description string
	files       []file
	entrypoint  []string
	cmd         []string
	ports       []string
	createdBy   string // the history entry, the Dockerfile's COPY
}

var specs = []imageSpec{
	{
		name:        "restart-supervisor",
		description: "restart-supervisor and restart-probe, copied into pods by the install init container",
		files: []file{
			{path: "restart-probe", mode: 0o755, src: binary("restart-probe")},
			{path: "restart-supervisor", mode: 0o755, src: binary("restart-supervisor")},
		},
		entrypoint: []string{"/restart-supervisor"},
		createdBy:  "COPY restart-supervisor restart-probe /",
	},
	{
		name:        "restart-injector",
		description: "the restart-injector admission webhook, node agent and CLI",
		files: []file{
			{path: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, src: func(in Inputs, _ v1.Platform) string { return in.CABundle }},
			{path: "restart-injector", mode: 0o755, src: binary("restart-injector")},
		},
		entrypoint: []string{"/restart-injector"},
		cmd:        []string{"serve"},
		ports:      []string{"8443/tcp", "8081/tcp"},
		createdBy:  "COPY ca-certificates.crt restart-injector /",
	},
}

// Inputs are everything an image's bytes depend on: the same Inputs give
// the same digests.
type Inputs struct {
	// BinDir holds the cross-compiled binaries, DIR/<os>_<arch>/<name>.
	BinDir string
	// CABundle is the injector image's /etc/ssl/certs/ca-certificates.crt.
	CABundle  string
	Version   string
	Source    string
	Revision  string
	Created   time.Time // every timestamp: config, history, file mtimes
	Platforms []v1.Platform
}

func (in Inputs) annotations(s imageSpec) map[string]string {
	return map[string]string{
		annVersion:     in.Version,
		annSource:      in.Source,
		annRevision:    in.Revision,
		annCreated:     in.Created.UTC().Format(time.RFC3339),
		annTitle:       s.name,
		annDescription: s.description,
	}
}

// layerTar is the image's one layer for platform p: the directories and
// files in name order, owned by root, every mtime Created, so that the
// bytes depend on the files' contents and modes alone.
func layerTar(in Inputs, s imageSpec, p v1.Platform) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := in.Created.UTC()
	dirs := map[string]bool{}
	for _, f := range s.files {
		for d := filepath.Dir(f.path); d != "."; d = filepath.Dir(d) {
			dirs[d+"/"] = true
		}
	}
	var names []string
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	for _, d := range names {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: mtime, Format: tar.FormatUSTAR}); err != nil {
			return nil, err
		}
	}
	files := append([]file(nil), s.files...)
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	for _, f := range files {
		src := f.src(in, p)
		st, err := os.Stat(src) // a CA bundle is often a symlink into the distribution's store
		if err != nil {
			return nil, err
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: not a regular file", src)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: f.path, Mode: f.mode, Size: int64(len(b)), ModTime: mtime, Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// image is s for platform p: an OCI manifest of one gzip layer over
// scratch, with the Dockerfile's entrypoint, command, user and ports.
func image(in Inputs, s imageSpec, p v1.Platform) (v1.Image, error) {
	tb, err := layerTar(in, s, p)
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", s.name, p.OS, p.Architecture, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tb)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: in.Created.UTC()}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: created, CreatedBy: s.createdBy},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = created
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Config.Entrypoint = s.entrypoint
	cf.Config.Cmd = s.cmd
	cf.Config.User = nonroot
	cf.Config.Labels = in.annotations(s)
	if len(s.ports) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, port := range s.ports {
			cf.Config.ExposedPorts[port] = struct{}{}
		}
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	return mutate.Annotations(img, in.annotations(s)).(v1.Image), nil
}

// index is s for every platform of in: the multi-arch OCI index.
func index(in Inputs, s imageSpec) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range in.Platforms {
		img, err := image(in, s, p)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Architecture, Variant: p.Variant}},
		})
	}
	return mutate.Annotations(idx, in.annotations(s)).(v1.ImageIndex), nil
}

// Built is one image written to the layout.
type Built struct {
	Name, Tag string
	Digest    v1.Hash
	Platforms []BuiltPlatform
}

// BuiltPlatform is one platform's manifest of a Built image.
type BuiltPlatform struct {
	Platform   string
	Digest     v1.Hash
	Compressed int64 // the layer's size as pulled
	Size       int64 // the files' size, unpacked
}

// Build writes both images as indexes of one OCI layout at dir, replacing
// what was there; each index is named <image>:<version> (ref.name).
func Build(in Inputs, dir string) ([]Built, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return nil, err
	}
	var out []Built
	for _, s := range specs {
		idx, err := index(in, s)
		if err != nil {
			return nil, err
		}
		ref := s.name + ":" + in.Version
		if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{annRefName: ref})); err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
		b := Built{Name: s.name, Tag: in.Version}
		if b.Digest, err = idx.Digest(); err != nil {
			return nil, err
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, d := range im.Manifests {
			img, err := idx.Image(d.Digest)
			if err != nil {
				return nil, err
			}
			m, err := img.Manifest()
			if err != nil {
				return nil, err
			}
			bp := BuiltPlatform{Platform: d.Platform.String(), Digest: d.Digest}
			for _, l := range m.Layers {
				bp.Compressed += l.Size
			}
			for _, f := range s.files {
				if st, err := os.Stat(f.src(in, *d.Platform)); err == nil {
					bp.Size += st.Size()
				}
			}
			b.Platforms = append(b.Platforms, bp)
		}
		out = append(out, b)
	}
	return out, nil
}

// Pushed is one index pushed: the reference to pin and the tag it went to.
type Pushed struct {
	Pinned, Tagged string
}

// Push sends every index of the layout at dir to prefix/<image>:<tag>,
// with the credentials of the local Docker configuration; insecure allows
// plain HTTP (a registry on loopback).
func Push(ctx context.Context, dir, prefix string, insecure bool) ([]Pushed, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	root, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	im, err := root.IndexManifest()
	if err != nil {
		return nil, err
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	var out []Pushed
	for _, d := range im.Manifests {
		refName := d.Annotations[annRefName]
		repo, tag, ok := strings.Cut(refName, ":")
		if !ok || repo == "" || tag == "" {
			return nil, fmt.Errorf("%s: index %s has no %s of the form IMAGE:TAG", dir, d.Digest, annRefName)
		}
		ref, err := name.NewTag(strings.TrimSuffix(prefix, "/")+"/"+repo+":"+tag, opts...)
		if err != nil {
			return nil, fmt.Errorf("REGISTRY %q: %w", prefix, err)
		}
		idx, err := root.ImageIndex(d.Digest)
		if err != nil {
			return nil, err
		}
		if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return nil, fmt.Errorf("push %s: %w", ref, err)
		}
		out = append(out, Pushed{Pinned: ref.Context().Name() + "@" + d.Digest.String(), Tagged: ref.Name()})
	}
	return out, nil
}
